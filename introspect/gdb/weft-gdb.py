# weft's gdb extension: the fibers of a process that cannot answer weft-dump,
# because it is a core file or stopped under gdb (docs/dump.md, "Post mortem").
#
#   info weft-fibers        every fiber of every scheduler, one line each
#   weft-bt <id|0xaddr>...  a fiber's backtrace: from its saved context, or
#                           its thread's if it runs
#   weft-bt all             every fiber that has started
#   weft-gcore [FILE]       gcore, with the stacks that gcore cannot read
#
# It needs no debug information: libweft exports a table of the offsets it
# reads (weft_gdb_layout) and the list of its schedulers
# (weft_gdb_schedulers), both described in introspect/gdb_layout.h, and
# everything else is read as raw memory. Installed as
# <datadir>/gdb/auto-load/<libdir>/libweft.so.<version>-gdb.py, gdb loads it
# with libweft; from a source tree: `source introspect/gdb/weft-gdb.py`.
# Sourcing it twice replaces the commands.

import struct
import time

import gdb

try:
    import gdb.unwinder

    _HAVE_UNWINDER = True
except ImportError:  # gdb before 7.10: the frame-pointer walk only
    _HAVE_UNWINDER = False

_LAYOUT_VERSION = 1
_MAX_SCHEDULERS = 4096
_MAX_FIBERS = 50_000_000
_MAX_FRAMES = 256


class WeftError(Exception):
    """Something the user should read as one line, not a Python traceback."""


# --- reading the inferior ---------------------------------------------------


def _read(address, size):
    try:
        return bytes(gdb.selected_inferior().read_memory(address, size))
    except gdb.MemoryError as e:
        raise WeftError("cannot read %d bytes at 0x%x: %s" % (size, address, e))


def _u64(address):
    return struct.unpack("<Q", _read(address, 8))[0]


def _cstring(address, limit=256, cache=None):
    if address == 0:
        return ""
    if cache is not None and address in cache:
        return cache[address]
    text = b""
    # Read in pieces: a string near the end of a mapping has no 256 bytes after it.
    while len(text) < limit:
        try:
            piece = bytes(gdb.selected_inferior().read_memory(address + len(text), 32))
        except gdb.MemoryError:
            break
        end = piece.find(b"\0")
        if end >= 0:
            text += piece[:end]
            break
        text += piece
    result = text.decode("utf-8", "replace")
    if cache is not None:
        cache[address] = result
    return result


def _symbol_address(name):
    """The address of a global of libweft by its name, with or without
    debug information (without, gdb knows it as a minimal symbol only)."""
    try:
        return int(gdb.parse_and_eval("(unsigned long)&%s" % name))
    except gdb.error:
        pass
    try:
        text = gdb.execute("info address %s" % name, to_string=True)
    except gdb.error:
        return None
    for word in text.replace(".", " ").split():
        if word.startswith("0x"):
            return int(word, 16)
    return None


# --- the layout table -------------------------------------------------------


class Layout:
    """weft_gdb_layout as a dict: {"fiber.id": 8, ...}."""

    def __init__(self):
        address = _symbol_address("weft_gdb_layout")
        if address is None:
            raise WeftError(
                "no weft here: the symbol weft_gdb_layout is not found "
                "(is libweft loaded? In a core file, gdb needs the executable too)"
            )
        if gdb.lookup_type("void").pointer().sizeof != 8:
            raise WeftError("only 64-bit processes are supported")
        self.fields = {}
        strings = {}
        for i in range(4096):
            name_ptr, value = struct.unpack("<QQ", _read(address + 16 * i, 16))
            if name_ptr == 0:
                break
            self.fields[_cstring(name_ptr, 64, strings)] = value
        version = self.fields.get("weft-gdb-layout")
        if version is None:
            raise WeftError(
                "weft_gdb_layout at 0x%x is not filled in "
                "(the process stopped before libweft was initialized?)" % address
            )
        if version != _LAYOUT_VERSION:
            raise WeftError(
                "libweft's layout is version %d, this script reads version %d: "
                "use the weft-gdb.py installed with that libweft" % (version, _LAYOUT_VERSION)
            )
        self.states = {v: k[len("state.") :] for k, v in self.fields.items() if k.startswith("state.")}

    def __getitem__(self, name):
        try:
            return self.fields[name]
        except KeyError:
            raise WeftError("libweft's weft_gdb_layout has no entry %r" % name)

    def has(self, name):
        return name in self.fields


# --- schedulers and fibers --------------------------------------------------


class Fiber:
    pass


class Scheduler:
    pass


def _fiber(layout, address, scheduler, strings):
    block = _read(address, layout["fiber.size"])

    def u64(field):
        return struct.unpack_from("<Q", block, layout[field])[0]

    f = Fiber()
    f.address = address
    f.scheduler = scheduler
    f.id = u64("fiber.id")
    raw = block[layout["fiber.name"] : layout["fiber.name"] + layout["fiber.name_size"]]
    f.name = raw.split(b"\0", 1)[0].decode("utf-8", "replace") or "fiber-%d" % f.id
    state = block[layout["fiber.state"]]
    f.state = layout.states.get(state, "unknown(%d)" % state)
    worker = u64("fiber.worker")
    f.worker = scheduler.worker_index.get(worker, -1) if worker != 0 else -1
    f.pinned = struct.unpack_from("<I", block, layout["fiber.pin_count"])[0] != 0
    for counter in ("active", "steal", "steal_fail", "preempt", "park"):
        setattr(f, counter, u64("fiber." + counter))
    kind = u64("fiber.wait_kind")
    f.wait_kind = _cstring(kind, 256, strings) if kind else ""
    f.wait_object = u64("fiber.wait_object") if kind else 0
    f.wait_operation = _cstring(u64("fiber.wait_operation"), 256, strings) if kind else ""
    f.parked_since_ns = struct.unpack_from("<q", block, layout["fiber.parked_since_ns"])[0]
    f.saved_context = u64("fiber.saved_context")
    f.next = u64("fiber.registry_next")
    # As take_snapshot (runtime/fiber_control.cpp): park() clears the wait
    # only once the fiber runs again, so a runnable fiber with a wait was
    # woken and waits for a worker.
    if f.state == "parked":
        f.park_state = -1
    elif f.state == "runnable" and f.wait_kind:
        f.park_state = 1
    else:
        f.park_state = 0
    return f


def schedulers(layout):
    """Every scheduler of the process, in creation order, with its fibers."""
    root = _symbol_address("weft_gdb_schedulers")
    if root is None:
        raise WeftError("the symbol weft_gdb_schedulers is not found")
    result = []
    strings = {}
    seen = set()
    node = _u64(root)
    while node != 0 and node not in seen and len(result) < _MAX_SCHEDULERS:
        seen.add(node)

        def field(name):
            return _u64(node + layout["scheduler." + name])

        s = Scheduler()
        s.address = node
        s.name = _cstring(field("name"), 256, strings)
        s.worker_count = field("worker_count")
        # Spare workers (docs/sysmon.md) follow the regular ones in the array.
        s.regular_workers = field("regular_workers") if layout.has("scheduler.regular_workers") else s.worker_count
        workers = field("workers")
        s.worker_index = {}
        s.worker_tids = []
        for i in range(min(s.worker_count, 65536)):
            worker = _u64(workers + 8 * i)
            s.worker_index[worker] = i
            tid = struct.unpack("<i", _read(worker + layout["worker.tid"], 4))[0] if layout.has("worker.tid") else 0
            s.worker_tids.append(tid)
        s.fibers = []
        s.errors = []
        shards = field("shards")
        for i in range(min(field("shard_count"), 65536)):
            shard = shards + i * layout["shard.size"]
            fiber = _u64(shard + layout["shard.head"])
            visited = set()
            while fiber != 0 and len(s.fibers) < _MAX_FIBERS:
                if fiber in visited:
                    s.errors.append("shard %d: the list loops at 0x%x" % (i, fiber))
                    break
                visited.add(fiber)
                try:
                    f = _fiber(layout, fiber, s, strings)
                except WeftError as e:
                    # A torn list in a core of a crash mid-spawn: keep the rest.
                    s.errors.append("shard %d: %s" % (i, e))
                    break
                s.fibers.append(f)
                fiber = f.next
        s.fibers.sort(key=lambda f: f.id)
        result.append(s)
        node = field("next")
    return result


def _is_live():
    """Whether the inferior is a process on this machine, so that its
    monotonic clock is ours; a core file's moment is unknown."""
    connection = getattr(gdb.selected_inferior(), "connection", None)
    return connection is not None and connection.type == "native"


def _now_ns():
    # park() stamps CLOCK_MONOTONIC, read through the TSC (runtime/fast_clock.h)
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _duration(ms):
    # tools/dump_text.cpp's format_duration_ms
    return "%.1f ms" % ms if ms < 10000 else "%.1f s" % (ms / 1000)


def _wait_site(f):
    text = f.wait_kind
    if f.wait_object:
        text += "@0x%x" % f.wait_object
    if f.wait_operation:
        text += " (%s)" % f.wait_operation
    return text


def _wait_time(f, now_ns, at_least):
    if f.parked_since_ns == 0 or now_ns is None or now_ns < f.parked_since_ns:
        return ""
    return " for %s%s" % ("at least " if at_least else "", _duration((now_ns - f.parked_since_ns) / 1e6))


def _worker_tid(f):
    tids = f.scheduler.worker_tids
    return tids[f.worker] if 0 <= f.worker < len(tids) else 0


def fiber_line(f, now_ns, at_least):
    """weft-dump's fiber block (tools/dump_text.cpp) on one line."""
    line = '- Fiber [0x%x] "%s" #%d active=%d steal=%d steal_fail=%d preempt=%d park=%d/%d %s' % (
        f.address,
        f.name,
        f.id,
        f.active,
        f.steal,
        f.steal_fail,
        f.preempt,
        f.park,
        f.park_state,
        f.state,
    )
    if f.state == "running":
        line += " on worker %d" % f.worker
        tid = _worker_tid(f)
        if tid:
            line += " [tid %d]" % tid
    elif f.worker >= 0:
        line += " (last ran on worker %d)" % f.worker
    else:
        line += " (not started yet)"
    if f.pinned:
        line += ", pinned to its worker"
    if f.wait_kind and f.park_state == 1:
        line += ", woken from waiting on %s, waits for a worker" % _wait_site(f)
    elif f.wait_kind and f.state == "parked":
        line += ", waiting on %s%s" % (_wait_site(f), _wait_time(f, now_ns, at_least))
    return line


def _clock(all_fibers):
    """Now, and whether it is only a lower bound. In a core file the time of
    the dump is unknown; the latest park of any fiber precedes it, so the
    time since then is a lower bound of each fiber's wait."""
    if _is_live():
        return _now_ns(), False
    latest = max((f.parked_since_ns for f in all_fibers), default=0)
    return (latest if latest > 0 else None), True


# --- backtraces -------------------------------------------------------------


class _FrameId:
    def __init__(self, sp, pc):
        self.sp = sp
        self.pc = pc


if _HAVE_UNWINDER:

    class _FiberUnwinder(gdb.unwinder.Unwinder):
        """Once armed with `registers`, makes the caller of the first frame
        gdb asks it about the fiber's saved context. That is the selected
        thread's innermost frame that is not an inlined one (gdb's inline
        unwinder takes those first): gdb then unwinds the fiber's stack
        with its own unwinders (.eh_frame, present without debug
        information) and names every frame as `bt` does. The thread's own
        frames, up to that one, are not shown."""

        def __init__(self):
            super().__init__("weft-fiber")
            self.registers = None
            self.frame_sp = 0
            self.claimed_level = None

        def __call__(self, pending_frame):
            registers = self.registers
            if registers is None:
                return None
            self.registers = None
            if hasattr(pending_frame, "level"):  # gdb 11
                self.claimed_level = pending_frame.level()
            pc = pending_frame.read_register("rip")
            # The claimed frame's id is the fiber's saved stack pointer, below
            # the fiber's frames, so that gdb finds them outer to it wherever
            # the fiber's stack lies relative to the thread's.
            word = gdb.lookup_type("unsigned long")
            info = pending_frame.create_unwind_info(_FrameId(gdb.Value(self.frame_sp).cast(word), pc))
            for name, value in registers.items():
                info.add_saved_register(name, gdb.Value(value).cast(word))
            return info

    _unwinder = _FiberUnwinder()
    gdb.unwinder.register_unwinder(None, _unwinder, replace=True)


def _saved_registers(layout, f):
    """The registers of the fiber's caller of the switch, from its saved
    context (runtime/fcontext_x86_64.cpp's frame)."""
    if not layout.has("context.x86_64"):
        raise WeftError("this libweft records no saved-context layout for its architecture")
    sp = f.saved_context
    if sp == 0:
        raise WeftError("fiber #%d has no saved context" % f.id)
    size = layout["context.frame_size"]
    frame = _read(sp, size)
    if frame == bytes(size):
        # A live fiber's saved frame always holds its return address.
        raise WeftError(
            "fiber #%d's stack reads as zeros at 0x%x: this core lacks it. gcore cannot read a "
            "mapping that holds a guard page of Linux 6.13+ (MADV_GUARD_INSTALL), as weft's stacks "
            "do, and writes zeros for the rest of it; a core dumped by the kernel has the stacks "
            "(docs/dump.md, \"Post mortem\")" % (f.id, sp)
        )

    def word(name):
        return struct.unpack_from("<Q", frame, layout["context." + name])[0]

    registers = {r: word(r) for r in ("rbx", "rbp", "r12", "r13", "r14", "r15")}
    registers["rip"] = word("pc")
    registers["rsp"] = sp + size
    return registers


def _frame_args(frame):
    """`name=value, ...` as bt prints them (scalars; others as ...), when
    there is debug information."""
    try:
        block = frame.block()
    except RuntimeError:
        return ""
    while block is not None and block.function is None:
        block = block.superblock
    if block is None:
        return ""
    scalar = {
        gdb.TYPE_CODE_PTR,
        gdb.TYPE_CODE_INT,
        gdb.TYPE_CODE_ENUM,
        gdb.TYPE_CODE_FLT,
        gdb.TYPE_CODE_BOOL,
        gdb.TYPE_CODE_CHAR,
    }
    args = []
    for symbol in block:
        if not symbol.is_argument:
            continue
        try:
            value = frame.read_var(symbol)
            text = str(value) if value.type.strip_typedefs().code in scalar else "..."
        except (gdb.error, RuntimeError):
            text = "<unreadable>"
        args.append("%s=%s" % (symbol.print_name, text))
    return ", ".join(args)


def _where(pc, sal):
    """` at file:line` with a line table, else ` from <shared object>`."""
    if sal is not None and sal.symtab is not None and sal.line != 0:
        return " at %s:%d" % (sal.symtab.filename, sal.line)
    solib = gdb.current_progspace().solib_name(pc)
    return " from %s" % solib if solib else ""


def _frame_lines(frame):
    """`frame` and its callers as bt prints them, numbered from 0."""
    lines = []
    last = None
    while frame is not None and len(lines) < _MAX_FRAMES:
        pc = frame.pc()
        if pc == 0:
            # Past the outermost frame of a context made by Boost's
            # make_fcontext, which does not mark itself as outermost.
            frame = None
            break
        name = frame.name() or "??"
        if frame.type() == gdb.INLINE_FRAME:
            head = "#%-2d %s" % (len(lines), name)
        else:
            head = "#%-2d 0x%016x in %s" % (len(lines), pc, name)
        lines.append(head + " (%s)" % _frame_args(frame) + _where(pc, frame.find_sal()))
        last, frame = frame, frame.older()
    if frame is not None:
        lines.append("(more than %d frames)" % _MAX_FRAMES)
    elif last is not None:
        # Why the unwind stopped, unless at the outermost frame.
        reason = last.unwind_stop_reason()
        if reason not in (gdb.FRAME_UNWIND_NO_REASON, gdb.FRAME_UNWIND_OUTERMOST):
            lines.append("Backtrace stopped: %s" % gdb.frame_stop_reason_string(reason))
    return lines


def _reselect(level):
    try:
        gdb.execute("frame %d" % level, to_string=True)
    except gdb.error:
        pass


def _unwound_frames(registers, sp):
    """The fiber's frames as gdb unwinds them; None if it cannot here (no
    thread to lend its innermost frame, or no unwinder API)."""
    if not _HAVE_UNWINDER:
        return None
    try:
        selected = gdb.selected_frame().level()
    except gdb.error:
        return None  # "No registers.": no thread
    _unwinder.registers = registers
    _unwinder.frame_sp = sp
    _unwinder.claimed_level = None
    gdb.invalidate_cached_frames()
    try:
        # The fiber's innermost frame is the caller of the frame the
        # unwinder claimed; gdb asks about each frame as it is reached.
        frame = gdb.newest_frame()
        for _ in range(64):
            if frame is None:
                return None
            if _unwinder.claimed_level is not None:
                if frame.level() == _unwinder.claimed_level:
                    return _frame_lines(frame.older())
            elif _unwinder.registers is None and frame.pc() == registers["rip"]:
                return _frame_lines(frame)  # before gdb 11: no levels; the saved pc marks it
            frame = frame.older()
        return None
    finally:
        _unwinder.registers = None
        gdb.invalidate_cached_frames()
        _reselect(selected)


def _running_frames(f):
    """A running fiber's frames: its worker thread's, whose stack it is."""
    tid = _worker_tid(f)
    thread = next((t for t in gdb.selected_inferior().threads() if tid and t.ptid[1] == tid), None)
    if thread is None:
        raise WeftError(
            "fiber #%d is running on worker %d, whose thread (tid %d) gdb does not list" % (f.id, f.worker, tid)
        )
    previous = gdb.selected_thread()
    try:
        selected = gdb.selected_frame().level()
    except gdb.error:
        selected = 0
    thread.switch()
    try:
        lines = _frame_lines(gdb.newest_frame())
    finally:
        previous.switch()
        _reselect(selected)
    return ["(running: the frames of worker %d's thread %d, LWP %d)" % (f.worker, thread.num, tid)] + lines


def _symbolize(pc):
    """Function and where, for a return address `pc` of the frame-pointer walk."""
    lookup = max(pc - 1, 0)  # inside the call, not after it
    name = None
    try:
        # The outermost function: the one whose frame this is, not one
        # inlined into it (which has no frame of its own).
        block = gdb.block_for_pc(lookup)
        while block is not None:
            if block.function is not None:
                name = block.function.print_name
            block = block.superblock
    except RuntimeError:
        pass
    if name is None:
        try:
            text = gdb.execute("info symbol 0x%x" % lookup, to_string=True).strip()
            if not text.startswith("No symbol"):
                name = text.split(" in section ")[0]
                if " + " in name:
                    name = name.rsplit(" + ", 1)[0]
        except gdb.error:
            pass
    return name or "??", gdb.find_pc_line(lookup)


def _frame_pointer_frames(registers):
    """The fiber's frames by its frame-pointer chain (weft builds with
    -fno-omit-frame-pointer): the saved return address, then [rbp + 8] and
    rbp = [rbp] upwards. Code built without frame pointers breaks the chain."""
    pcs = [registers["rip"]]
    rbp = registers["rbp"]
    while rbp != 0 and rbp % 8 == 0 and len(pcs) < _MAX_FRAMES:
        try:
            next_rbp, pc = struct.unpack("<QQ", _read(rbp, 16))
        except WeftError:
            break
        if pc == 0:
            break
        pcs.append(pc)
        if next_rbp <= rbp:
            break
        rbp = next_rbp
    lines = []
    for i, pc in enumerate(pcs):
        name, sal = _symbolize(pc)
        lines.append("#%-2d 0x%016x in %s ()%s" % (i, pc, name, _where(pc, sal)))
    return lines


def fiber_backtrace(layout, f, frame_pointers=False):
    """The lines of a fiber's backtrace, or WeftError saying why it has none."""
    if f.state == "running":
        return _running_frames(f)
    if f.state == "done":
        raise WeftError("fiber #%d has finished" % f.id)
    if f.active == 0:
        raise WeftError("fiber #%d has not started yet: no frames" % f.id)
    registers = _saved_registers(layout, f)
    lines = None if frame_pointers else _unwound_frames(registers, f.saved_context)
    if not lines:
        lines = _frame_pointer_frames(registers)
    return lines


# --- completing gcore's core files -----------------------------------------

_GCORE_CHUNK = 1 << 20  # gdb's gcore copies a section in pieces of this size (MAX_COPY_BYTES)
_PAGE = 4096


def _core_segments(core):
    """(file offset, address, size) of each PT_LOAD segment of an ELF64
    little-endian core file with contents."""
    header = core.read(64)
    if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1 or struct.unpack_from("<H", header, 16)[0] != 4:
        raise WeftError("not an x86-64 core file")
    phoff, shoff = struct.unpack_from("<QQ", header, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
    if phnum == 0xFFFF:  # PN_XNUM: the count is in section header 0's sh_info
        core.seek(shoff + 0x2C)
        phnum = struct.unpack("<I", core.read(4))[0]
    core.seek(phoff)
    table = core.read(phentsize * phnum)
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _ = struct.unpack_from("<IIQQQQQ", table, i * phentsize)
        if p_type == 1 and p_filesz > 0:
            yield p_offset, p_vaddr, p_filesz


def _complete_core(path):
    """Writes into gcore's core file at `path` the memory it could not read.

    gcore copies each mapping in 1 MiB pieces and gives up on the rest of a
    mapping at the first piece it cannot read whole, leaving zeros. A guard
    page of Linux 6.13+ (MADV_GUARD_INSTALL) lies inside its mapping and
    cannot be read, so every weft stack after the first guard of a mapping
    (the stacks' mappings merge) was lost. Here each mapping is read again
    in the same pieces; from the first piece that fails on, each page is
    copied, and only the guard pages stay zeros. Returns the number of
    pages written."""
    inferior = gdb.selected_inferior()
    written = 0
    with open(path, "r+b") as core:
        for offset, address, size in list(_core_segments(core)):
            lost = False
            for start in range(0, size, _GCORE_CHUNK):
                length = min(_GCORE_CHUNK, size - start)
                try:
                    data = bytes(inferior.read_memory(address + start, length))
                    if lost:
                        core.seek(offset + start)
                        core.write(data)
                        written += length // _PAGE
                    continue
                except gdb.MemoryError:
                    lost = True
                for page in range(start, start + length, _PAGE):
                    try:
                        data = bytes(inferior.read_memory(address + page, min(_PAGE, start + length - page)))
                    except gdb.MemoryError:
                        continue  # a guard page, or the vsyscall page: zeros, as the kernel dumps them
                    core.seek(offset + page)
                    core.write(data)
                    written += 1
    return written


# --- commands ---------------------------------------------------------------


class InfoWeftFibers(gdb.Command):
    """Every fiber of every weft scheduler: its control block's address, name,
id, counters, state, and what it waits on, in the form of weft-dump's fiber
lines (docs/dump.md), one line each.

Usage: info weft-fibers

Works on a live process and on a core file, without debug information.
In a core file the time of the dump is unknown: a wait is shown as lasting
at least the time from its park to the latest park of any fiber.
See also: weft-bt."""

    def __init__(self):
        super().__init__("info weft-fibers", gdb.COMMAND_STACK)

    def invoke(self, argument, from_tty):
        try:
            layout = Layout()
            found = schedulers(layout)
        except WeftError as e:
            raise gdb.GdbError("weft: %s" % e)
        if not found:
            gdb.write("(no running weft schedulers)\n")
            return
        now_ns, at_least = _clock([f for s in found for f in s.fibers])
        for s in found:
            gdb.write(
                'Scheduler "%s": %d workers, %d fibers\n' % (s.name, s.regular_workers, len(s.fibers))
            )
            for f in s.fibers:
                gdb.write(fiber_line(f, now_ns, at_least) + "\n")
            for error in s.errors:
                gdb.write("  (incomplete: %s)\n" % error)


class WeftBacktrace(gdb.Command):
    """The backtrace of a weft fiber: from the context it saved when it last
switched away (where it parked, yielded or was preempted), or for a running
fiber its worker thread's, whose stack it runs on (a crash in a fiber: the
crashing thread's).

Usage: weft-bt [-fp] ID|0xADDRESS...
       weft-bt [-fp] all

ID is the fiber's id (#ID in `info weft-fibers`), ADDRESS its control block
([0x...] there). `all` prints every fiber that has started. The
frames are unwound by gdb itself (with .eh_frame, and debug information for
file:line and arguments where there is some); -fp follows the frame-pointer
chain instead. Frame numbers are the fiber's own; `frame N` does not select
them. Works on a live process and on a core file."""

    def __init__(self):
        super().__init__("weft-bt", gdb.COMMAND_STACK)

    def invoke(self, argument, from_tty):
        words = gdb.string_to_argv(argument)
        frame_pointers = "-fp" in words
        words = [w for w in words if w != "-fp"]
        if not words:
            raise gdb.GdbError("usage: weft-bt [-fp] ID|0xADDRESS...|all")
        try:
            layout = Layout()
            fibers = [f for s in schedulers(layout) for f in s.fibers]
        except WeftError as e:
            raise gdb.GdbError("weft: %s" % e)
        if words == ["all"]:
            chosen = [f for f in fibers if f.active != 0]
        else:
            chosen = []
            for w in words:
                try:
                    key = int(w, 0)
                except ValueError:
                    raise gdb.GdbError("weft-bt: %r is not a fiber id or address" % w)
                match = [f for f in fibers if (f.address if w.lower().startswith("0x") else f.id) == key]
                if not match:
                    raise gdb.GdbError("weft-bt: no fiber %s (see info weft-fibers)" % w)
                chosen += match
        now_ns, at_least = _clock(fibers)
        for i, f in enumerate(chosen):
            if i > 0:
                gdb.write("\n")
            gdb.write(fiber_line(f, now_ns, at_least) + "\n")
            try:
                for line in fiber_backtrace(layout, f, frame_pointers):
                    gdb.write(line + "\n")
            except WeftError as e:
                gdb.write("weft-bt: %s\n" % e)


class WeftGcore(gdb.Command):
    """gcore, then the memory that gcore could not read: the fibers' stacks.

Usage: weft-gcore [FILE]

Writes a core file of the live process as gcore does (FILE defaults to
core.<pid>), then reads again what gcore left as zeros, and writes it in.
gcore gives up on the rest of a mapping at the first megabyte it cannot
read whole, and on Linux 6.13+ a guard page of weft's stacks lies inside
their mapping (MADV_GUARD_INSTALL): a plain gcore then lacks most fibers'
stacks, and weft-bt on that core says so. A core the kernel dumps has them."""

    def __init__(self):
        super().__init__("weft-gcore", gdb.COMMAND_FILES, gdb.COMPLETE_FILENAME)

    def invoke(self, argument, from_tty):
        words = gdb.string_to_argv(argument)
        if len(words) > 1:
            raise gdb.GdbError("usage: weft-gcore [FILE]")
        if not _is_live():
            raise gdb.GdbError("weft-gcore: needs a live process on this machine (run, or attach with gdb -p)")
        path = words[0] if words else "core.%d" % gdb.selected_inferior().pid
        gdb.execute("gcore %s" % path)
        try:
            pages = _complete_core(path)
        except (OSError, WeftError) as e:
            raise gdb.GdbError("weft-gcore: %s: %s" % (path, e))
        gdb.write("weft-gcore: %s: wrote %d pages that gcore could not read\n" % (path, pages))


InfoWeftFibers()
WeftBacktrace()
WeftGcore()
