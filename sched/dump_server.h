// The in-process half of weft-dump: a thread that answers dump requests on a
// private Unix socket, reading scheduler snapshots without the workers'
// cooperation, so that a busy or stuck worker cannot block a dump.
//
// One server per process, not per scheduler: the socket is named after the
// pid (`<dir>/<pid>.sock`, sched/dump_socket.h), and one `weft-dump <pid>`
// must show every scheduler of the process. So schedulers register with a
// process-wide list. That list is weft's one global, and it is justified:
// the thing it models, "this process's weft schedulers", is itself
// process-wide, and it holds nothing but registrations, so schedulers stay
// independent objects. The server thread starts with the first registered
// scheduler and stops, removing its socket, with the last. A process that
// exits with a scheduler still alive removes the socket from an atexit
// handler.
//
// Protocol: the client connects and sends one line, "dump" (everything) or
// "summary" (per scheduler only its counts, for `weft-dump --list`); the
// server answers with one JSON document (sched/dump_format.h) and closes.
// A peer of another uid (SO_PEERCRED) gets {"error": ...} instead.
// Requests are served one at a time on the server's thread.
//
// Turned off by Config::dump = false, or for the whole process by the
// environment variable WEFT_DUMP=0.
#pragma once

namespace weft::detail {

class SchedulerCore;

// A scheduler's membership in the dump server's list. The SchedulerCore
// owns one as its last member: attach() once it is fully built, and the
// destructor detaches before any part of it is destroyed. Detaching waits
// for a dump that is reading this scheduler.
class DumpRegistration {
 public:
  DumpRegistration() noexcept = default;
  DumpRegistration(const DumpRegistration&) = delete;
  DumpRegistration& operator=(const DumpRegistration&) = delete;
  ~DumpRegistration();

  // Registers `core` unless its Config or WEFT_DUMP turns dumps off. If the
  // server cannot start (no usable socket directory), says why on stderr
  // and carries on without it: a dump is never worth failing a service.
  void attach(SchedulerCore& core);

 private:
  SchedulerCore* core_ = nullptr;
};

// False when the environment variable WEFT_DUMP is "0", "false", "off" or "no".
bool dump_enabled_by_environment() noexcept;

}  // namespace weft::detail
