// A thread that makes a child process is that child's parent in the
// kernel's eyes, not the process: when the thread ends, the child gets the
// signal it asked for with prctl(PR_SET_PDEATHSIG), though the process
// lives on. On a plain thread the program decides when that is; a fiber
// makes its children on whatever thread runs it, and weft's spare and
// helper threads end after their keep-alive (Config::spare_keep_alive,
// Config::blocking_keep_alive), which killed the children of a fiber that
// had run on one. Go keeps every M; tokio's blocking threads have the same
// trap. So a thread that has made a child keeps itself: a spare or a
// helper that has never ends by its keep-alive, only with its scheduler
// (docs/sysmon.md, "Spare workers").
#pragma once

namespace weft::detail {

// On the thread that made a child process (fork, vfork, posix_spawn;
// system() and popen() spawn through posix_spawn), in the parent, once
// the call has returned. Async-signal-safe: a handler may fork.
void note_child_made() noexcept;

// Whether the calling thread has made a child process since it started.
bool made_a_child() noexcept;

}  // namespace weft::detail
