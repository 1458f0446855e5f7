// What weft-dump's server (introspect/dump_server.h) and its CLI (tools/)
// agree on, header-only so that the CLI needs no part of libweft: the
// schema version, the requests, and where the sockets live.
//
// Sockets: `<dir>/<pid>.sock`, `<dir>` private to the user (owned by it,
// mode 0700, so nobody else can plant or replace a socket in it). The
// server prefers `$XDG_RUNTIME_DIR/weft`, else `/tmp/weft-<uid>`; when that
// one is not safe (someone else made it first) it makes its own
// `/tmp/weft-<uid>.XXXXXX`. The CLI does not guess from its own
// environment: it finds the socket that the target process itself listens
// on (tools/dump_client.cpp reads /proc/<pid>), checks its directory as the
// server did, and then the server's credentials (SO_PEERCRED).
#pragma once

#include <poll.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace weft::detail {

// Bump when a field of the JSON (introspect/dump_fields.h) changes meaning,
// goes away or is added: both ends read exactly their own version.
constexpr int kDumpFormatVersion = 6;  // 6: held_by_readers

// The request lines a client may send (one, ended by '\n').
constexpr std::string_view kDumpRequestFull = "dump";        // workers and every fiber
constexpr std::string_view kDumpRequestSummary = "summary";  // per scheduler only its counts
constexpr std::string_view kDumpRequestMetrics = "metrics";  // the counts and the workers, no fibers
constexpr std::string_view kDumpRequestTrace = "trace";      // "trace <ms>": a timeline (trace_recorder.h)
constexpr long kMaxTraceMs = 60'000;
constexpr std::size_t kMaxDumpRequestBytes = 256;

constexpr std::string_view kDumpSocketSuffix = ".sock";

// The directory a server of this user prefers (it may not exist yet).
inline std::string preferred_dump_socket_directory() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/weft";
  return "/tmp/weft-" + std::to_string(::geteuid());
}

// Where a server makes its own directory when the preferred one is not
// safe: a template for mkdtemp(), whose directory is 0700 and new.
inline std::string fallback_dump_socket_template() { return "/tmp/weft-" + std::to_string(::geteuid()) + ".XXXXXX"; }

inline std::string dump_socket_path(const std::string& directory, pid_t pid) {
  return directory + "/" + std::to_string(pid) + std::string(kDumpSocketSuffix);
}

// "" if `directory` is a real directory (not a symlink) owned by `uid` and
// closed to everyone else (mode 0700), else why not, naming it. Both ends
// check: another user who could write in it could replace the socket.
inline std::string check_private_directory(const std::string& directory, uid_t uid) {
  struct stat st;
  if (::lstat(directory.c_str(), &st) != 0) return "cannot stat " + directory + ": " + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return directory + " is not a directory";
  if (st.st_uid != uid)
    return directory + " belongs to uid " + std::to_string(st.st_uid) + ", not " + std::to_string(uid);
  if ((st.st_mode & 0777) != 0700) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return directory + " has mode " + mode + ", not 0700 (open to other users)";
  }
  return {};
}

// Both ends hold every exchange to a deadline, so that a peer that stalls
// costs its own request and nobody else's.
inline int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for `events` on `fd` until `deadline`; false on timeout or error.
inline bool wait_for(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

}  // namespace weft::detail
