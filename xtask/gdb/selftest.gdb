# The scripted session `cargo xtask test` runs on every port (boot words `run=uthread_kn`):
# stop where the kernel has just saved a user thread into its ThMB and posts the event
# (BLOCKED for a sleep, PREEMPTED for a tick), then list what the extension sees.
python
# Every event goes through `post_as` (the stop paths call it directly, other posters through
# `post`); a file-local function, so it is a static symbol.
post = None
for name in ("kernel::notify::machine::post_as", "kernel::notify::machine::post"):
    post = gdb.lookup_static_symbol(name) or gdb.lookup_global_symbol(name)
    if post is not None:
        break
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
