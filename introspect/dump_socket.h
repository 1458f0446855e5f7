// Where weft-dump's server listens: choosing a private directory, binding
// `<dir>/<pid>.sock` in it, and removing both again, also at exit
// (docs/dump.md, "How it works" and "Security").
//
// Directories, in order of preference (introspect/dump_protocol.h):
// `$XDG_RUNTIME_DIR/weft`, `/tmp/weft-<uid>`, and a fresh
// `/tmp/weft-<uid>.XXXXXX` of the process's own when neither is safe (or
// their socket path would be too long for a Unix socket). A process
// killed by a signal cannot remove its fallback directory: the next
// server of that uid removes the ones with no live process inside
// (remove_stale_fallback_directories).
#pragma once

#include <sys/types.h>

#include <string>

namespace weft::detail {

class DumpSocket {
 public:
  DumpSocket() = default;
  DumpSocket(const DumpSocket&) = delete;
  DumpSocket& operator=(const DumpSocket&) = delete;

  // Picks the directory, binds and listens; "" or why it could not (the
  // server is then off). Says on stderr when it falls back.
  std::string open();
  // Closes the socket and removes its file (and the directory if it was
  // the process's own).
  void close() noexcept;
  // In a forked child: lets go of the parent's socket without removing it.
  void forget() noexcept;

  int fd() const noexcept { return fd_; }
  const std::string& path() const noexcept { return path_; }

 private:
  // The directory to serve from: "" and `why` when there is none.
  std::string choose_directory(std::string& why);
  std::string abandon(std::string error);

  int fd_ = -1;
  std::string path_;
  std::string own_directory_;  // the fallback directory this process made, if it did
};

// Removes this uid's fallback directories (`/tmp/weft-<uid>.XXXXXX`) that
// hold no socket of a live process and are older than a minute (a younger
// empty one may be a server's that is about to bind). Best effort.
void remove_stale_fallback_directories() noexcept;

}  // namespace weft::detail
