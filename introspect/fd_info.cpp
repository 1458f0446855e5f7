#include "fd_info.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>

#include "../runtime/system_calls.h"

namespace weft::detail {
namespace {

// Each look at the fd is a raw system call (runtime/system_calls.h): the fd
// belongs to a fiber that may close it at any moment.

// "127.0.0.1:41234", "[::1]:80", "unix /run/x.sock"; empty if unknown.
std::string address_text(const sockaddr_storage& address, socklen_t length) {
  char host[INET6_ADDRSTRLEN] = {};
  char text[INET6_ADDRSTRLEN + 16];
  if (address.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &in.sin_addr, host, sizeof(host));
    std::snprintf(text, sizeof(text), "%s:%u", host, ntohs(in.sin_port));
    return text;
  }
  if (address.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof(host));
    std::snprintf(text, sizeof(text), "[%s]:%u", host, ntohs(in6.sin6_port));
    return text;
  }
  if (address.ss_family == AF_UNIX) {
    const auto& un = reinterpret_cast<const sockaddr_un&>(address);
    const std::size_t path_length =
        length > offsetof(sockaddr_un, sun_path) ? length - offsetof(sockaddr_un, sun_path) : 0;
    if (path_length == 0 || un.sun_path[0] == '\0') return "unix";
    return "unix " + std::string(un.sun_path, strnlen(un.sun_path, path_length));
  }
  return {};
}

std::string describe_socket(int fd) {
  sockaddr_storage local{};
  socklen_t local_length = sizeof(local);
  if (sys::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0) return "socket";
  std::string here = address_text(local, local_length);
  if (here.empty()) return "socket";
  sockaddr_storage peer{};
  socklen_t peer_length = sizeof(peer);
  if (sys::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) == 0) {
    const std::string there = address_text(peer, peer_length);
    // An unnamed unix socket (a socketpair) on both ends says nothing more.
    if (here == "unix" && there == "unix") return "unix socket";
    return here + " -> " + there;
  }
  int listening = 0;
  socklen_t flag_length = sizeof(listening);
  if (sys::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &flag_length) == 0 && listening != 0)
    return "listening " + here;
  return here;
}

// What /proc/self/fd/N links to: "pipe:[123]", "anon_inode:[eventfd]", a path.
std::string link_target(int fd) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  char target[512];
  const ssize_t n = ::readlink(path, target, sizeof(target) - 1);
  if (n <= 0) return {};
  return std::string(target, static_cast<std::size_t>(n));
}

}  // namespace

std::string describe_fd(int fd) {
  struct stat info {};
  if (sys::fstat(fd, &info) != 0) return "closed";
  if (S_ISSOCK(info.st_mode)) return describe_socket(fd);
  if (S_ISFIFO(info.st_mode)) return "pipe";
  const std::string target = link_target(fd);
  if (target.rfind("anon_inode:", 0) == 0) {
    // "anon_inode:[eventfd]" -> "eventfd"
    std::string kind = target.substr(11);
    if (kind.size() > 2 && kind.front() == '[' && kind.back() == ']') kind = kind.substr(1, kind.size() - 2);
    return kind;
  }
  if (S_ISREG(info.st_mode)) return target.empty() ? "file" : "file " + target;
  if (S_ISCHR(info.st_mode)) return target.empty() ? "character device" : "device " + target;
  if (S_ISDIR(info.st_mode)) return "directory";
  return target.empty() ? "fd" : target;
}

}  // namespace weft::detail
