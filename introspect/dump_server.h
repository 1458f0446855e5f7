// The in-process half of weft-dump: a thread that answers dump requests on a
// private Unix socket, reading scheduler snapshots without the workers'
// cooperation, so that a busy or stuck worker cannot block a dump.
//
// One server per process, not per scheduler: the socket is named after the
// pid (`<dir>/<pid>.sock`, introspect/dump_protocol.h), and one `weft-dump <pid>`
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
// server answers with one JSON document (introspect/dump_format.h) and closes.
// A peer of another uid (SO_PEERCRED) gets {"error": ...} instead. Each
// client is served on a thread of its own, under deadlines of its own, up
// to 16 at once (more are told the server is busy), so that no client can
// hold the others up.
//
// fork(): the child forgets the parent's server (pthread_atfork), whose
// socket stays the parent's; a scheduler made in the child starts its own.
//
// Turned off by Config::dump = false, or for the whole process by the
// environment variable WEFT_DUMP=0.
#pragma once

#include <string>

namespace weft::detail {

class SchedulerCore;

// Adds `core` to the server's list, starting the server with the first.
// If it cannot start (no usable socket directory), says why on stderr and
// carries on without it: a dump is never worth failing a service.
void attach_to_dump_server(SchedulerCore& core);
// Takes `core` off the list, waiting for a dump that is reading it; stops
// the server with the last. A core that was never attached is ignored.
void detach_from_dump_server(SchedulerCore& core) noexcept;

// Keeps the server running while a pool lives, also in a process with no
// scheduler (thread pools only). False if the server is off (WEFT_DUMP=0)
// or could not start; else detach_pool_services() follows.
bool attach_pool_services(const std::string& pool_name);
void detach_pool_services() noexcept;

// False when the environment variable WEFT_DUMP is "0", "false", "off" or "no".
bool dump_enabled_by_environment() noexcept;

}  // namespace weft::detail
