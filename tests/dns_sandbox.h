// A private nameserver for resolver tests and benchmarks: the process
// enters a mount and network namespace of its own, brings its loopback up,
// bind-mounts a private resolv.conf naming 127.0.0.1 over /etc/resolv.conf
// (the machine's own file is never touched: the mount exists only in this
// namespace), and starts tests/dns_responder.py on 127.0.0.1:53 there. No
// packet can leave: the namespace has no interface but its own loopback.
//
// Call enter() first thing in a process of its own (a test's child, a
// benchmark's main), before any thread starts: namespaces belong to the
// calling thread and are inherited only by threads it creates later.
//
//   std::string why = test::DnsSandbox::enter(responder, 200);
//   if (!why.empty()) GTEST_SKIP() << why;
//   getaddrinfo("h7.weft.test", ...);   // 127.1.0.7, after 200 ms
#pragma once

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "private_namespaces.h"

namespace weft::test {

class DnsSandbox {
 public:
  // Enters the namespaces and starts the responder at `responder` (the
  // path of dns_responder.py), answering after `delay_ms`. Returns "" on
  // success, else why it could not (namespaces refused: the caller skips).
  // The responder is stopped by stop(), and dies with the process anyway.
  static std::string enter(const std::string& responder, int delay_ms) {
    if (std::string why = enter_private_namespaces(CLONE_NEWNS | CLONE_NEWNET); !why.empty()) return why;
    if (std::string why = bring_loopback_up(); !why.empty()) return why;
    if (std::string why = private_resolv_conf(); !why.empty()) return why;
    return start_responder(responder, delay_ms);
  }

  static void stop() {
    if (responder_pid() <= 0) return;
    ::kill(responder_pid(), SIGTERM);
    int status = 0;
    ::waitpid(responder_pid(), &status, 0);
    responder_pid() = -1;
  }

 private:
  static pid_t& responder_pid() {
    static pid_t pid = -1;
    return pid;
  }

  static std::string error(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

  static std::string bring_loopback_up() {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return error("socket");
    ifreq request{};
    std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
    int result = ::ioctl(fd, SIOCGIFFLAGS, &request);
    if (result == 0) {
      request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP);
      result = ::ioctl(fd, SIOCSIFFLAGS, &request);
    }
    const std::string why = result == 0 ? "" : error("bringing lo up");
    ::close(fd);
    return why;
  }

  static std::string private_resolv_conf() {
    char path[] = "/tmp/weft-resolv-XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0) return error("mkstemp");
    const std::string text = "nameserver 127.0.0.1\noptions timeout:10 attempts:1\n";
    const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    if (!written) return error("writing the private resolv.conf");
    const bool mounted = ::mount(path, "/etc/resolv.conf", nullptr, MS_BIND, nullptr) == 0;
    const std::string why = mounted ? "" : error("bind-mounting a private /etc/resolv.conf");
    ::unlink(path);  // the mount keeps the file
    return why;
  }

  static std::string start_responder(const std::string& responder, int delay_ms) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return error("pipe2");
    const std::string delay = std::to_string(delay_ms);
    const pid_t pid = ::fork();
    if (pid < 0) return error("fork");
    if (pid == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::execlp("python3", "python3", responder.c_str(), "--delay-ms", delay.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    responder_pid() = pid;
    // Up to the end of its line (it may come in more than one write), and
    // the pipe is kept open: the responder must never meet EPIPE.
    std::string line;
    char c = 0;
    while (line.size() < 64 && ::read(out[0], &c, 1) == 1 && c != '\n') line += c;
    if (line != "ready") {
      ::close(out[0]);
      stop();
      return "the DNS responder (" + responder + ") did not start: '" + line + "'";
    }
    return "";
  }
};

}  // namespace weft::test
