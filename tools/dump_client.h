// The CLI's half of the weft-dump protocol (introspect/dump_server.h): find a
// process's socket, decide why there is none, ask, and read the answer
// under a deadline so that a stuck process cannot hang the tool.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdio>
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

// The same as text only, checked to be a dump (what `weft-dump` renders
// with read_dump(): a 100,000-fiber dump is too big for a JsonValue tree).
ByteBuffer request_dump_text(pid_t pid, const std::string& request, std::chrono::milliseconds timeout);

// Asks for a full dump and copies the server's JSON to `out` as it arrives,
// without parsing it: what `weft-dump --json` prints. Throws as request_dump
// before the first byte is written.
void stream_dump(pid_t pid, std::chrono::milliseconds timeout, std::FILE* out);

// The pids of this user's processes that have a dump socket, ascending.
// Sockets left behind by processes that no longer exist are removed.
std::vector<pid_t> find_dump_processes();

}  // namespace weft::tools
