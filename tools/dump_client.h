// The CLI's half of the weft-dump protocol (introspect/dump_server.h): find
// the socket a process itself listens on, check that it is private to this
// user and served by that very process, ask, and read the answer under a
// deadline so that a stuck process cannot hang the tool.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dump_text.h"

namespace weft::tools {

// Why a dump could not be had, worded for the operator (weft-dump prints it
// on stderr and exits 1).
struct DumpUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the server answered: its JSON as sent (what --json prints), and read
// back into the snapshot it was written from.
struct DumpAnswer {
  std::string text;
  ProcessSnapshot snapshot;
};

// Sends `request` ("dump" or "summary") to process `pid` and returns its
// answer. Throws DumpUnavailable: no such process, another user's process,
// not a weft process or dumps off, a socket that is not private or not
// served by `pid`, a busy server, no answer within `timeout`, the server's
// own refusal, or an answer that is not a dump.
DumpAnswer request_dump(pid_t pid, const std::string& request, std::chrono::milliseconds timeout);

// What the server answered, read back; throws DumpUnavailable when it is
// not a dump: a refusal (with the server's reason), nothing at all or a
// document cut short (the process exited or shut down meanwhile), or
// something this weft-dump cannot read (another format version).
ProcessSnapshot read_answer(pid_t pid, std::string_view answer);

// Asks for a full dump and copies the server's JSON to `out` as it arrives,
// without parsing it: what `weft-dump --json` prints. Throws as request_dump
// before the first byte is written.
void stream_dump(pid_t pid, std::chrono::milliseconds timeout, std::FILE* out);

// Asks for a trace of `duration` (introspect/trace_recorder.h) and copies
// its Chrome Trace Event JSON to `out` as it arrives: what `weft-dump
// --trace` prints. `timeout` is for the answer, after the recording.
void stream_trace(pid_t pid, std::chrono::milliseconds duration, std::chrono::milliseconds timeout, std::FILE* out);

// The dump socket that process `pid` listens on, found in /proc/<pid> (its
// open sockets, and their names in its network namespace): "" if it has
// none (and, if it could not look, why in `why`). Not the caller's guess
// from its own environment.
std::string find_dump_socket(pid_t pid, std::string* why = nullptr);

// The pids of this user's processes that listen on a dump socket, ascending.
std::vector<pid_t> find_dump_processes();

}  // namespace weft::tools
