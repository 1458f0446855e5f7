#include "dump_socket.h"

#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "../runtime/log.h"
#include "dump_protocol.h"

namespace weft::detail {
namespace {

// What the atexit handler removes: a plain array, the pid that made it and
// a flag, readable at exit without taking a lock that a dying thread may
// hold. The pid keeps a forked child's exit() from removing its parent's
// socket (the child's own atfork handler clears the flag too).
char exit_socket_path[sizeof(sockaddr_un::sun_path)];
char exit_socket_directory[sizeof(sockaddr_un::sun_path)];  // "" unless the server made it for itself
std::atomic<pid_t> exit_socket_owner{0};
std::atomic<bool> exit_socket_bound{false};

void remove_socket_at_exit() {
  if (exit_socket_owner.load() != ::getpid()) return;
  if (!exit_socket_bound.exchange(false)) return;
  ::unlink(exit_socket_path);
  if (exit_socket_directory[0] != '\0') ::rmdir(exit_socket_directory);
}

// Makes `directory` (0700) if it is missing and checks that it is this
// user's alone; "" or why not.
std::string prepare_directory(const std::string& directory) {
  if (::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST)
    return "cannot create " + directory + ": " + std::strerror(errno);
  return check_private_directory(directory, ::geteuid());
}

// Why a socket in `directory` could not be bound by name, or "".
std::string too_long(const std::string& directory) {
  const std::string path = dump_socket_path(directory, ::getpid());
  if (path.size() < sizeof(sockaddr_un::sun_path)) return {};
  return std::string("its socket path would be ") + std::to_string(path.size()) +
         " bytes, more than a Unix socket takes (" + std::to_string(sizeof(sockaddr_un::sun_path) - 1) + ")";
}

}  // namespace

std::string DumpSocket::choose_directory(std::string& why) {
  own_directory_.clear();
  std::vector<std::string> candidates{preferred_dump_socket_directory()};
  const std::string shared_tmp = std::string("/tmp/weft-") + std::to_string(::geteuid());
  if (candidates.front() != shared_tmp) candidates.push_back(shared_tmp);
  std::string skipped;  // "X (why); Y (why)"
  for (const std::string& directory : candidates) {
    std::string problem = too_long(directory);
    if (problem.empty()) problem = prepare_directory(directory);
    if (problem.empty()) {
      if (!skipped.empty())
        log_message(LogLevel::warning, "weft: weft-dump: not using %s; serving from %s", skipped.c_str(),
                    directory.c_str());
      return directory;
    }
    skipped += (skipped.empty() ? "" : "; ") + directory + " (" + problem + ")";
  }
  // Someone else's directory, or one open to others: a socket in it could
  // be replaced. A fresh one of our own instead; the CLI finds it through
  // /proc (introspect/dump_protocol.h).
  std::string name = fallback_dump_socket_template();
  if (::mkdtemp(name.data()) == nullptr) {
    why = "not using " + skipped + ", and cannot create " + name + ": " + std::strerror(errno);
    return {};
  }
  log_message(LogLevel::warning, "weft: weft-dump: not using %s; serving from %s", skipped.c_str(), name.c_str());
  own_directory_ = name;
  return name;
}

std::string DumpSocket::open() {
  std::string why;
  const std::string directory = choose_directory(why);
  if (directory.empty()) return why;
  path_ = dump_socket_path(directory, ::getpid());
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(address.sun_path)) return abandon("socket path too long: " + path_);
  std::memcpy(address.sun_path, path_.c_str(), path_.size() + 1);

  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return abandon(std::string("socket: ") + std::strerror(errno));
  // A socket left by an earlier process that had our pid and died
  // without cleaning up: the pid is ours now, and so is the name.
  ::unlink(path_.c_str());
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || ::chmod(path_.c_str(), 0600) != 0 ||
      ::listen(fd_, 64) != 0) {
    const std::string error = "cannot listen on " + path_ + ": " + std::strerror(errno);
    ::unlink(path_.c_str());
    return abandon(error);
  }
  std::memcpy(exit_socket_path, path_.c_str(), path_.size() + 1);
  std::memcpy(exit_socket_directory, own_directory_.c_str(), own_directory_.size() + 1);
  exit_socket_owner.store(::getpid());
  exit_socket_bound.store(true);
  static std::once_flag atexit_registered;
  std::call_once(atexit_registered, [] { std::atexit(&remove_socket_at_exit); });
  return {};
}

std::string DumpSocket::abandon(std::string error) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!own_directory_.empty()) ::rmdir(own_directory_.c_str());
  own_directory_.clear();
  return error;
}

void DumpSocket::close() noexcept {
  remove_socket_at_exit();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  own_directory_.clear();
}

void DumpSocket::forget() noexcept {
  exit_socket_bound.store(false);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  own_directory_.clear();
}

void remove_stale_fallback_directories() noexcept {
  const std::string prefix = std::string("weft-") + std::to_string(::geteuid()) + ".";
  DIR* tmp = ::opendir("/tmp");
  if (tmp == nullptr) return;
  while (const dirent* entry = ::readdir(tmp)) {
    const std::string name = entry->d_name;
    // mkdtemp's six characters after the prefix, nothing else.
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string directory = "/tmp/" + name;
    struct stat st;
    if (!check_private_directory(directory, ::geteuid()).empty() || ::lstat(directory.c_str(), &st) != 0) continue;
    if (::time(nullptr) - st.st_mtime < 60) continue;  // perhaps a server about to bind
    DIR* inside = ::opendir(directory.c_str());
    if (inside == nullptr) continue;
    std::vector<std::string> sockets;
    bool live = false, other = false;
    while (const dirent* file = ::readdir(inside)) {
      const std::string f = file->d_name;
      if (f == "." || f == "..") continue;
      const std::size_t dot = f.size() - std::min(f.size(), kDumpSocketSuffix.size());
      if (dot == 0 || f.compare(dot, std::string::npos, kDumpSocketSuffix) != 0 ||
          f.find_first_not_of("0123456789") != dot || dot > 9) {
        other = true;  // not ours to remove
        continue;
      }
      const pid_t pid = static_cast<pid_t>(std::atol(f.substr(0, dot).c_str()));
      if (::kill(pid, 0) == 0 || errno == EPERM) live = true;
      sockets.push_back(directory + "/" + f);
    }
    ::closedir(inside);
    if (live || other) continue;
    for (const std::string& socket : sockets) ::unlink(socket.c_str());
    ::rmdir(directory.c_str());
  }
  ::closedir(tmp);
}

}  // namespace weft::detail
