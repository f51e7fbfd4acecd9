# The scripted session `cargo xtask test` runs on every port (boot words `run=uthread_kn`):
# stop where the kernel has just saved a user thread into its ThMB and posts the event
# (BLOCKED for a sleep, PREEMPTED for a tick), then list what the extension sees.
python
# Every stop path of a running user thread calls `stopped(thmb)` (a debug-build function) after
# the save, with the program's table still loaded.
post = gdb.lookup_static_symbol("kernel::notify::machine::stopped") or gdb.lookup_global_symbol("kernel::notify::machine::stopped")
# At the entry address itself (a breakpoint after the prologue may land in inlined code).
gdb.Breakpoint("*0x%x" % int(post.value().address))
for _ in range(200):
    gdb.execute("continue")
    thmb = int(gdb.selected_frame().read_var("thmb"))
    if thmb != 0:
        gdb.set_convenience_variable("thmb", thmb)
        break
end
tsumugi programs
tsumugi load-symbols
tsumugi cpus
tsumugi uthreads
tsumugi ubt $thmb
