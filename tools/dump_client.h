// The CLI's half of the weft-dump protocol (sched/dump_server.h): find a
// process's socket, decide why there is none, ask, and read the answer
// under a deadline so that a stuck process cannot hang the tool.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "json.h"

namespace weft::tools {

// Why a dump could not be had, worded for the operator (weft-dump prints it
// on stderr and exits 1).
struct DumpUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the server answered: its JSON as sent (what --json prints) and parsed.
struct DumpAnswer {
  std::string text;
  JsonValue json;
};

// Sends `request` ("dump" or "summary") to process `pid` and returns its
// parsed answer. Throws DumpUnavailable: no such process, another user's
// process, not a weft process or dumps off, no answer within `timeout`,
// or the server's own refusal.
DumpAnswer request_dump(pid_t pid, const std::string& request, std::chrono::milliseconds timeout);

// The pids of this user's processes that have a dump socket, ascending.
// Sockets left behind by processes that no longer exist are removed.
std::vector<pid_t> find_dump_processes();

}  // namespace weft::tools
