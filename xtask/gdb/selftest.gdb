# The scripted session `cargo xtask test` runs on every port (boot words `run=uthread_kn`):
# stop where the kernel has just saved a user thread into its ThMB and posts the event
# (BLOCKED for a sleep, PREEMPTED for a tick), then list what the extension sees.
python
post = gdb.lookup_global_symbol("kernel::notify::machine::post") or gdb.lookup_symbol("kernel::notify::machine::post")[0]
# At the entry address itself (a breakpoint after the prologue may land in inlined code).
gdb.Breakpoint("*0x%x" % int(post.value().address))
for _ in range(200):
    gdb.execute("continue")
    event = gdb.selected_frame().read_var("event")
    if int(event["thread"]) != 0:
        gdb.set_convenience_variable("thmb", int(event["thread"]))
        break
end
tsumugi programs
tsumugi load-symbols
tsumugi cpus
tsumugi uthreads
tsumugi ubt $thmb
