// One weft-dump client's request, answered on that client's own thread
// (dump_clients.h): the peer's uid checked, the request line read, and a
// dump, a summary, the metrics or a trace sent back (dump_protocol.h). What
// it needs of the server, it is given (DumpSources), so that the server
// itself is only its socket, its threads and their lifetimes.
#pragma once

#include <chrono>
#include <functional>
#include <string_view>

#include "snapshot_queue.h"
#include "trace_recorder.h"

namespace weft::detail {

struct DumpSources {
  // Has the server's thread take the snapshot `wanted` asks for; false if
  // the server stopped first.
  std::function<bool(SnapshotRequest& wanted)> snapshot;
  // The live fibers' names, for a trace.
  std::function<FiberNames()> fiber_names;
};

// Answers the client on `client` (the caller closes it), accepted at
// `accepted`, from which its deadlines count.
void answer_dump_client(int client, std::chrono::steady_clock::time_point accepted, const DumpSources& sources);

// Sends all of `data` on the non-blocking socket `fd`; false if the peer
// went away or `deadline` passed first.
bool send_answer(int fd, std::string_view data, std::chrono::steady_clock::time_point deadline);

// How long a client may take to send its request line, and to take its
// whole answer, from its accept. Deadlines, not per-call timeouts, so that
// a byte every few seconds cannot hold a client's thread for longer.
inline constexpr auto kRequestDeadline = std::chrono::seconds(2);
inline constexpr auto kAnswerDeadline = std::chrono::seconds(60);

}  // namespace weft::detail
