// Connections: every open connection of a thread- or fiber-per-connection
// server (echo_server, backend), so that a stop can shut them all down.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <unordered_set>

namespace weft::bench {

// stop() shuts every one down: a blocked read or a parked wait then
// returns, and the connection ends along its own loop's normal path.
// Touched once per connect and close, never per message.
class Connections {
 public:
  // False once stopping: the caller closes the fd instead of serving it.
  bool add(int fd) {
    std::lock_guard guard(lock_);
    if (stopping_) return false;
    fds_.insert(fd);
    return true;
  }
  // Closes under the lock, so that stop() never shuts down a descriptor
  // number already reused by a newer connection.
  void close(int fd) {
    std::lock_guard guard(lock_);
    fds_.erase(fd);
    ::close(fd);
  }
  void stop() {
    std::lock_guard guard(lock_);
    stopping_ = true;
    for (const int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }

 private:
  std::mutex lock_;
  std::unordered_set<int> fds_;
  bool stopping_ = false;
};

}  // namespace weft::bench
