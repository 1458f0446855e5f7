#include "dump_requests.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <string>

#include "dump_format.h"
#include "dump_protocol.h"

namespace weft::detail {
namespace {

using Clock = std::chrono::steady_clock;

// The request line, "" if none came whole by `deadline`.
std::string read_request(int fd, Clock::time_point deadline) {
  std::string request;
  char buffer[64];
  while (request.size() < kMaxDumpRequestBytes && request.find('\n') == std::string::npos) {
    if (!wait_for(fd, POLLIN, deadline)) return {};
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    request.append(buffer, static_cast<std::size_t>(n));
  }
  request.erase(std::find(request.begin(), request.end(), '\n'), request.end());
  if (!request.empty() && request.back() == '\r') request.pop_back();
  return request;
}

// "trace <ms>": records on this client's thread, which is what the
// recording costs the server; a client that goes away, or a server that
// stops (it shuts the connection down), cuts it short.
void answer_trace(int client, const std::string& ms_text, Clock::time_point accepted, const DumpSources& sources) {
  char* end = nullptr;
  const long ms = std::strtol(ms_text.c_str(), &end, 10);
  if (ms_text.empty() || *end != '\0' || ms < 1 || ms > kMaxTraceMs) {
    send_answer(client,
                error_json("bad trace length \"" + ms_text + "\" (1 to " + std::to_string(kMaxTraceMs) + " ms)"),
                accepted + kAnswerDeadline);
    return;
  }
  const auto answer_deadline = accepted + std::chrono::milliseconds(ms) + kAnswerDeadline;
  const auto gone = [client] {
    pollfd p{client, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  };
  std::string trace;
  try {
    trace = record_trace(std::chrono::milliseconds(ms), gone, sources.fiber_names);
  } catch (const std::exception& e) {
    send_answer(client, error_json(std::string("no trace: ") + e.what()), answer_deadline);
    return;
  }
  send_answer(client, trace, answer_deadline);
}

}  // namespace

bool send_answer(int fd, std::string_view data, Clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (!wait_for(fd, POLLOUT, deadline)) return false;
      continue;
    }
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

void answer_dump_client(int client, Clock::time_point accepted, const DumpSources& sources) {
  const auto answer_deadline = accepted + kAnswerDeadline;
  ucred peer{};
  socklen_t size = sizeof(peer);
  if (::getsockopt(client, SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0 || peer.uid != ::geteuid()) {
    send_answer(
        client,
        error_json("permission denied: weft-dump serves only its own user (uid " + std::to_string(::geteuid()) + ")"),
        answer_deadline);
    return;
  }
  const std::string request = read_request(client, accepted + kRequestDeadline);
  if (request.rfind(std::string(kDumpRequestTrace) + " ", 0) == 0) {
    answer_trace(client, request.substr(kDumpRequestTrace.size() + 1), accepted, sources);
    return;
  }
  SnapshotRequest wanted;
  if (request == kDumpRequestFull) {
    wanted.detail = DumpDetail::full;
  } else if (request == kDumpRequestSummary) {
    wanted.detail = DumpDetail::summary;
  } else if (request == kDumpRequestMetrics) {
    wanted.detail = DumpDetail::metrics;
  } else {
    send_answer(client,
                error_json("unknown request \"" + request +
                           "\" (expected \"dump\", \"summary\", \"metrics\" or \"trace <ms>\")"),
                answer_deadline);
    return;
  }
  if (!sources.snapshot(wanted)) return;  // the server is stopping: no answer, which weft-dump explains
  if (!wanted.error.empty()) {
    send_answer(client, error_json("snapshot failed: " + wanted.error), answer_deadline);
    return;
  }
  // Streamed: once a piece is sent there is no taking it back, so a
  // failure from here on (out of memory) just ends the answer early,
  // which the client reports as a dump cut short.
  try {
    write_json(wanted.process, wanted.detail,
               [&](std::string_view piece) { return send_answer(client, piece, answer_deadline); });
  } catch (const std::exception&) {
  }
}

}  // namespace weft::detail
