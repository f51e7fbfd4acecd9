"""Tsumugi's gdb extension (loaded by `cargo xtask gdb`): commands that read the kernel's and
libuthread's structures by symbol.

  tsumugi programs        live programs (domains): id, name, load base, kernel threads
  tsumugi load-symbols    add each live program's symbols at its load address
  tsumugi cpus            each CPU's current kernel thread, its program and vCPU
  tsumugi kthreads        the kernel threads of every live program, with their saved LTN
  tsumugi uthreads        the user thread each vCPU on a CPU runs (its LTN), with its state
                          (threads waiting in libuthread's queues are not listed: programs
                          carry no debug information to find them by)
  tsumugi ubt THMB        (a ThreadId is its ThMB address) backtrace of the user thread whose ThMB is at THMB, from its saved
                          register window (or the full frame the kernel saved), by frame pointers
                          (stopped inside a function's prologue, as a new thread preempted at its
                          first instructions is: its caller from the link register or the stack)

`cargo xtask gdb` sets `tsumugi_programs` (name -> ELF path) before sourcing this file.
"""

import struct

import gdb

try:
    tsumugi_programs
except NameError:
    tsumugi_programs = {}

# ThMB state words (libuthread/src/sched/runstate.rs) and save masks (tsumugi-abi kn::mask).
MASK_WINDOW = 1
MASK_FULL = 2


def _arch():
    name = gdb.selected_inferior().architecture().name()
    if "x86-64" in name or "i386" in name:
        return "x86_64"
    if "riscv" in name:
        return "riscv64"
    return "aarch64"


def _type(v):
    return v.type.strip_typedefs()


def _scalar(v):
    """Descends single-field wrappers (atomics, cells, NonNull, Unique) to a scalar or pointer."""
    for _ in range(8):
        t = _type(v)
        if t.code != gdb.TYPE_CODE_STRUCT or not t.fields():
            return v
        v = v[t.fields()[0]]
    return v


def _find(v, name, depth=5):
    """The first field called `name` at most `depth` wrappers down."""
    t = _type(v)
    if t.code != gdb.TYPE_CODE_STRUCT:
        return None
    for f in t.fields():
        if f.name == name:
            return v[f]
    if depth == 0:
        return None
    for f in t.fields():
        found = _find(v[f], name, depth - 1)
        if found is not None:
            return found
    return None


def _vec(vec):
    """The elements of a Rust `Vec<T>`."""
    n = int(_scalar(_find(vec, "len")))
    ptr = _scalar(_find(vec, "ptr"))
    try:
        elem = _type(vec).template_argument(0)
    except RuntimeError:
        name = str(_type(vec))
        elem = gdb.lookup_type(name[name.index("<") + 1 : _outer_comma(name)])
    ptr = ptr.cast(elem.pointer())
    return [ptr[i] for i in range(n)]


def _outer_comma(name):
    """Index of the comma (or closing bracket) ending the first generic argument of `name`."""
    depth = 0
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
            if depth == 0:
                return i
        elif c == "," and depth == 1:
            return i
    return len(name)


def _string(s):
    """A Rust `String`'s text."""
    vec = _find(s, "vec")
    items = _vec(vec)
    return bytes(int(b) & 0xFF for b in items).decode("utf-8", "replace")


def _arc_data(arc_or_weak):
    """The value behind an `Arc`/`Weak` (its `ArcInner::data`)."""
    inner = _scalar(_find(arc_or_weak, "ptr"))
    return inner.dereference()["data"]


def _mutex_data(mutex):
    """The value inside a spin `Mutex` (read without taking it: gdb stops the world)."""
    return _find(mutex, "data")["value"]


def programs():
    """(id, name, entry, thread ids) of every live domain."""
    live = _mutex_data(gdb.parse_and_eval("kernel::domain::LIVE"))
    out = []
    for weak in _vec(live):
        ptr = int(_scalar(_find(weak, "ptr")))
        if ptr in (0, 0xFFFFFFFFFFFFFFFF):
            continue
        d = _arc_data(weak)
        inner = _mutex_data(d["inner"])
        if int(_scalar(inner["finished"])):
            continue
        threads = [int(t) for t in _vec(inner["threads"])]
        out.append((int(d["id"]), _string(d["name"]), int(_scalar(d["entry"])), threads))
    return out


def _elf_entry(path):
    with open(path, "rb") as f:
        head = f.read(64)
    return struct.unpack_from("<Q", head, 24)[0]


def load_base(name, entry):
    path = tsumugi_programs.get(name)
    if path is None:
        return None, None
    return path, entry - _elf_entry(path)


def cpus():
    """(cpu, current Thread value or None) for every online CPU."""
    online = int(_scalar(gdb.parse_and_eval("kernel::sched::scheduler::ONLINE")))
    table = gdb.parse_and_eval("kernel::sched::scheduler::CPUS")
    out = []
    for i in range(max(online, 1)):
        cur = _scalar(table[i]["current"])
        out.append((i, cur.dereference() if int(cur) else None))
    return out


def _thread_program(tid, progs):
    for pid, name, _, threads in progs:
        if tid in threads:
            return pid, name
    return None, None


def _current_ltn():
    arch = _arch()
    # In the kernel: x86_64's user GS base is parked in KERNEL_GS_BASE (swapgs); aarch64's
    # TPIDR_EL0 is the user's; riscv64's tp holds the kernel's per-CPU pointer (the user's is
    # in the trap frame), so no register names the LTN there.
    for reg in {"x86_64": ["k_gs_base"], "riscv64": [], "aarch64": ["TPIDR_EL0", "tpidr_el0"]}[arch]:
        try:
            return int(gdb.parse_and_eval("$" + reg)) & 0xFFFFFFFFFFFFFFFF
        except gdb.error:
            continue
    return None


NOT_A_VCPU = (1 << 64) - 1


def kthreads():
    """(cpu or None, tid, program name, vcpu, ltn) for the kernel threads the CPUs run, and the
    saved LTN of the others is read from their `Thread` through the per-CPU `current` only."""
    progs = programs()
    out = []
    selected = gdb.selected_thread().num if gdb.selected_thread() else None
    for cpu, t in cpus():
        if t is None:
            out.append((cpu, None, None, None, None))
            continue
        tid = int(t["id"])
        _, name = _thread_program(tid, progs)
        vcpu = int(_scalar(t["vcpu"]))
        ltn = int(_scalar(t["ltn"]))
        # The thread on a CPU has its LTN in the register, not in `ltn` (None: unreadable).
        try:
            gdb.execute("thread %d" % (cpu + 1), to_string=True)
            ltn = _current_ltn()
        except gdb.error:
            ltn = None
        out.append((cpu, tid, name, None if vcpu in (NOT_A_VCPU, (1 << 64) - 1) else vcpu, ltn))
    if selected is not None:
        gdb.execute("thread %d" % selected, to_string=True)
    return out


# libuthread's ThMB (libuthread/src/thmb.rs, `repr(C)`): the kernel's `ThmbHeader` (its type is
# in the kernel's debug information), then the register window, the state word (u32) and the
# vCPU index (usize). Programs are built without debug information, so the window is read by
# its layout (libuthread/src/context/<arch>.rs, sizes asserted there).
WINDOW_SIZE = {"x86_64": 64, "riscv64": 28 * 8, "aarch64": 23 * 8}
# (pc, frame pointer, sp) offsets inside the window; pc None: the window keeps no pc, the thread
# resumes with a `ret` at sp (x86_64), so the pc is the word at sp.
WINDOW_REGS = {"x86_64": (None, 8, 48), "riscv64": (0, 16, 8), "aarch64": (88, 80, 96)}
# (pc, frame pointer, sp) in tsumugi-abi's FullFrame: a field name, or (array field, index)
# (riscv64 keeps registers by number with the pc in slot 0; s0 is x8, sp x2).
FULL_REGS = {
    "x86_64": ("rip", "rbp", "rsp"),
    "riscv64": (("x", 0), ("x", 8), ("x", 2)),
    "aarch64": ("pc", ("x", 29), "sp"),
}
STATES = ["ready", "running", "parking", "notified", "parked", "parked-in-place", "woken", "blocked-in-kernel"]


def _full_type():
    """The kernel's `FullFrame` for this architecture (tsumugi-abi `kn::<arch>`)."""
    return gdb.lookup_type("tsumugi_abi::kn::%s::FullFrame" % _arch())


def _header_size():
    """`size_of::<ThmbHeader>()`: the mask, the full frame, `fp_area` and `fp_format`."""
    return 8 + _full_type().sizeof + 16


def _thmb_fields(addr):
    """(mask, state, vcpu) of the ThMB at `addr`."""
    mask = _read_u64(addr)
    state_at = addr + _header_size() + WINDOW_SIZE[_arch()]
    state = _read_u64(state_at) & 0xFFFFFFFF
    vcpu = _read_u64((state_at + 4 + 7) // 8 * 8)
    return mask, state, vcpu


def _thmb_summary(addr):
    mask, state, vcpu = _thmb_fields(addr)
    saved = "full" if mask & MASK_FULL else ("window" if mask & MASK_WINDOW else "none")
    name = STATES[state] if state < len(STATES) else "state %d" % state
    return "thmb=0x%x state=%s vcpu=%d saved=%s" % (addr, name, vcpu, saved)


PSTATE_PAN = 1 << 22


def _read_u64(addr):
    try:
        return struct.unpack("<Q", bytes(gdb.selected_inferior().read_memory(addr, 8)))[0]
    except gdb.MemoryError:
        if _arch() != "aarch64":
            raise
    # aarch64 with PAN set (the kernel runs so): QEMU's debug accesses use the privileged
    # translation that may not touch user pages. Clear PSTATE.PAN for the read, then restore it.
    cpsr = int(gdb.parse_and_eval("$cpsr"))
    if not cpsr & PSTATE_PAN:
        raise gdb.MemoryError("Cannot access memory at address 0x%x" % addr)
    gdb.execute("set $cpsr = %d" % (cpsr & ~PSTATE_PAN), to_string=True)
    try:
        return struct.unpack("<Q", bytes(gdb.selected_inferior().read_memory(addr, 8)))[0]
    finally:
        gdb.execute("set $cpsr = %d" % cpsr, to_string=True)


def _saved_registers(addr):
    """(pc, frame pointer, sp, which save) of a stopped user thread: the FULL frame the kernel
    saved when the mask says so, else the window of its last voluntary switch."""
    arch = _arch()
    mask = _read_u64(addr)
    if mask & MASK_FULL:
        # Read word by word (through `_read_u64`), at the offsets the kernel's type gives.
        fields = {f.name: f.bitpos // 8 for f in _full_type().fields()}
        regs = []
        for n in FULL_REGS[arch]:
            offset = fields[n[0]] + 8 * n[1] if isinstance(n, tuple) else fields[n]
            regs.append(_read_u64(addr + 8 + offset))
        return regs[0], regs[1], regs[2], "full frame"
    window = addr + _header_size()
    pc_at, fp_at, sp_at = WINDOW_REGS[arch]
    fp, sp = _read_u64(window + fp_at), _read_u64(window + sp_at)
    pc = _read_u64(sp) if pc_at is None else _read_u64(window + pc_at)
    return pc, fp, sp, "window"


def _address(text):
    """An address from an expression; a Rust `Result`/`Option` value (e.g. `$` after `finish`
    out of `kernel::notify::save::save`) gives its payload."""
    v = gdb.parse_and_eval(text)
    shown = str(v)
    if "::Err(" in shown or shown.endswith("::None"):
        raise gdb.GdbError("tsumugi: %s is %s, not an address" % (text, shown))
    for _ in range(6):
        t = _type(v)
        if t.code in (gdb.TYPE_CODE_INT, gdb.TYPE_CODE_PTR):
            return int(v) & 0xFFFFFFFFFFFFFFFF
        fields = [f for f in t.fields() if not f.artificial]
        if not fields:
            break
        v = v[fields[0]]
    raise gdb.GdbError("tsumugi: %s is not an address" % text)


def _symbol(pc):
    block = None
    try:
        block = gdb.block_for_pc(pc)
    except RuntimeError:
        pass
    while block is not None and block.function is None:
        block = block.superblock
    if block is not None and block.function is not None:
        return block.function.print_name
    sym = gdb.execute("info symbol 0x%x" % pc, to_string=True).strip()
    if sym.startswith("No symbol"):
        return "??"
    return sym.split(" in section ")[0]


# Where a FULL frame keeps the link register (the return address while a function's prologue
# has not yet stored it in a frame record), and how many bytes of a function count as its
# prologue: the frame record is set up by then in this build (`-C force-frame-pointers`).
FULL_LINK = {"riscv64": ("x", 1), "aarch64": ("x", 30)}
PROLOGUE_BYTES = {"x86_64": 4, "riscv64": 16, "aarch64": 12}


def _function_offset(pc):
    """The offset of `pc` in its function (from the symbol table), or None if unknown."""
    sym = gdb.execute("info symbol 0x%x" % pc, to_string=True).strip()
    if sym.startswith("No symbol"):
        return None
    name = sym.split(" in section ")[0]
    if " + " not in name:
        return 0
    try:
        return int(name.rsplit(" + ", 1)[1])
    except ValueError:
        return None


def _prologue_caller(addr, pc, sp):
    """The return address of a thread stopped (FULL frame) inside its function's prologue, which
    has not yet linked a frame record — so the frame-pointer walk would skip its caller (a
    thread preempted at its first instructions, as a new thread often is): the link register
    (riscv64, aarch64), or the word the call pushed (x86_64, before and just after `push rbp`).
    None when the stop is past the prologue."""
    arch = _arch()
    offset = _function_offset(pc)
    if offset is None or offset >= PROLOGUE_BYTES[arch]:
        return None
    if arch == "x86_64":
        # At the entry the return address is at rsp; after `push rbp` (1 byte) at rsp + 8.
        return _read_u64(sp if offset == 0 else sp + 8) if offset <= 1 else None
    fields = {f.name: f.bitpos // 8 for f in _full_type().fields()}
    field, index = FULL_LINK[arch]
    return _read_u64(addr + 8 + fields[field] + 8 * index)


def backtrace(addr, limit=32):
    """[(pc, function)] of the user thread at ThMB `addr`, walking frame pointers."""
    pc, fp, sp, kind = _saved_registers(addr)
    arch = _arch()
    frames = [(pc, _symbol(pc))]
    caller = _prologue_caller(addr, pc, sp) if kind == "full frame" else None
    if caller:
        frames.append((caller, _symbol(caller)))
    for _ in range(limit):
        if fp == 0 or fp % 8:
            break
        try:
            if arch == "riscv64":
                ret, prev = _read_u64(fp - 8), _read_u64(fp - 16)
            else:
                prev, ret = _read_u64(fp), _read_u64(fp + 8)
        except (gdb.error, gdb.MemoryError):
            break
        if ret == 0:
            break
        if not (caller and len(frames) == 2 and ret == caller):
            # (Equal: the prologue had linked its record after all, and the caller is listed.)
            frames.append((ret, _symbol(ret)))
        if prev <= fp:
            break
        fp = prev
    return frames


class Tsumugi(gdb.Command):
    """Tsumugi: `tsumugi programs|load-symbols|cpus|kthreads|uthreads|ubt THMB`."""

    def __init__(self):
        super().__init__("tsumugi", gdb.COMMAND_USER, gdb.COMPLETE_NONE, True)

    def invoke(self, arg, from_tty):
        words = arg.split()
        if not words:
            raise gdb.GdbError("usage: tsumugi programs|load-symbols|cpus|kthreads|uthreads|ubt THMB")
        what, rest = words[0], words[1:]
        if what == "programs":
            for pid, name, entry, threads in programs():
                path, base = load_base(name, entry)
                where = "base 0x%x" % base if base is not None else "entry 0x%x" % entry
                print("program %d %s: %s, kernel threads %s" % (pid, name, where, threads))
        elif what == "load-symbols":
            for pid, name, entry, _ in programs():
                path, base = load_base(name, entry)
                if path is None:
                    print("program %d %s: no ELF known (not built by this xtask run)" % (pid, name))
                    continue
                gdb.execute("add-symbol-file %s -o 0x%x" % (path, base), to_string=True)
                print("program %d %s: symbols of %s at 0x%x" % (pid, name, path, base))
        elif what == "cpus":
            for cpu, tid, name, vcpu, ltn in kthreads():
                if tid is None:
                    print("cpu %d: idle" % cpu)
                else:
                    shown = "unreadable in the kernel on this port" if ltn is None else "0x%x" % ltn
                    print("cpu %d: kernel thread %d program %s vcpu %s ltn %s" % (cpu, tid, name or "-", vcpu, shown))
        elif what == "kthreads":
            for pid, name, _, threads in programs():
                print("program %d %s: kernel threads %s" % (pid, name, ", ".join(str(t) for t in threads)))
        elif what == "uthreads":
            seen = False
            for cpu, tid, name, vcpu, ltn in kthreads():
                if tid is None or vcpu is None:
                    continue
                if ltn is None:
                    print("vcpu %d (cpu %d, %s): its LTN register is unreadable in the kernel on this port; "
                          "use `tsumugi ubt THMB` with a ThMB address (a ThreadId, or an event's `thread`)" % (vcpu, cpu, name))
                elif ltn == 0:
                    print("vcpu %d (cpu %d, %s): in the library (LTN 0)" % (vcpu, cpu, name))
                else:
                    try:
                        print("vcpu %d (cpu %d, %s): running %s" % (vcpu, cpu, name, _thmb_summary(ltn)))
                        seen = True
                    except gdb.MemoryError:
                        print("vcpu %d (cpu %d, %s): LTN 0x%x, not mapped in the CPU's current translation" % (vcpu, cpu, name, ltn))
            if not seen:
                print("no user thread on a vCPU right now")
        elif what == "ubt":
            if not rest:
                raise gdb.GdbError("usage: tsumugi ubt THMB (an address from `tsumugi uthreads`)")
            addr = _address(" ".join(rest))
            pc, fp, sp, kind = _saved_registers(addr)
            print("user thread 0x%x from its %s save: pc 0x%x fp 0x%x sp 0x%x" % (addr, kind, pc, fp, sp))
            for i, (pc, fn) in enumerate(backtrace(addr)):
                print("#%d 0x%x in %s" % (i, pc, fn))
        else:
            raise gdb.GdbError("tsumugi: unknown subcommand %r" % what)


Tsumugi()
