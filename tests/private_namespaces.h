// Namespaces of a test's own: the calling process leaves the machine's
// mount namespace (and, asked, its network namespace), so that what it
// mounts, or the loopback it brings up, exists only for it. Not root: a
// user namespace of its own makes it root in there.
//
// Call it first thing in a process of its own (a test's child, a
// benchmark's main), before any thread starts: namespaces belong to the
// calling thread and are inherited only by threads it creates later.
//
//   std::string why = test::enter_private_namespaces(CLONE_NEWNS);
//   if (!why.empty()) GTEST_SKIP() << why;
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace weft::test {

// `flags`: CLONE_NEWNS, with CLONE_NEWNET if asked. Returns "" on success,
// else why it could not (the caller skips).
inline std::string enter_private_namespaces(int flags) {
  const auto error = [](const char* what) { return std::string(what) + ": " + std::strerror(errno); };
  const auto write_file = [](const char* path, const std::string& text) {
    const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    [[maybe_unused]] const ssize_t n = ::write(fd, text.data(), text.size());
    ::close(fd);
  };
  if (::unshare(flags) != 0) {
    const uid_t uid = ::getuid();
    const gid_t gid = ::getgid();
    if (::unshare(CLONE_NEWUSER | flags) != 0)
      return error("namespaces unavailable (unshare, also with CLONE_NEWUSER)");
    write_file("/proc/self/setgroups", "deny");
    write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1");
    write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1");
  }
  // Mounts made from here on stay in this namespace.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return error("mount --make-rprivate /");
  return "";
}

}  // namespace weft::test
