// The seed's backend: answers every HTTP/1.1 request with "Ok!" after
// --delay-ms (100 ms), a stand-in for a database or a downstream service.
//
//   build/benchmarks/backend --port 8081 [--delay-ms 100] [--threads 4096]
//                            [--pool fibers|threads]
//
// Written as plain blocking code, as a thread-per-connection server is: a
// weft::Pool named "backend" runs one task per keep-alive connection, which
// reads a request with blocking read(), sleeps, and write()s the answer,
// serving up to --threads connections at once. On weft fibers by default
// (the libc hooks park the reads, weft::this_fiber::sleep_for the delay);
// --pool threads makes the pool std::threads.
//
// Not cpp-httplib, as the gateway is: the backend is the far end of the
// load, as wrk is the near end, and shares the machine's cores with the
// gateway being measured. On cpp-httplib it cost about as much CPU per
// request as the gateway itself (docs/benchmarks.md, "The seed's gateway").
// It reads requests up to the blank line and skips a Content-Length body;
// it answers "Connection: close" requests and then closes.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>
#include <weft/weft.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

#include "cli.h"
#include "connections.h"
#include "echo_net.h"

namespace {

constexpr const char* kProgram = "backend";
constexpr std::size_t kMaxRequestBytes = 16 * 1024;  // headers; larger is answered 431 and closed
constexpr std::string_view kOk = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nOk!";
constexpr std::string_view kOkClose =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\nOk!";
constexpr std::string_view kTooLarge =
    "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// The value of header `name` (lower case, with its colon) in `head`, or
// empty. Header names are case-insensitive.
std::string_view header(std::string_view head, std::string_view name) {
  for (std::size_t line = head.find("\r\n"); line != std::string_view::npos; line = head.find("\r\n", line + 2)) {
    const std::string_view rest = head.substr(line + 2);
    if (rest.size() < name.size()) break;
    bool match = true;
    for (std::size_t i = 0; i < name.size() && match; ++i)
      match = std::tolower(static_cast<unsigned char>(rest[i])) == name[i];
    if (!match) continue;
    std::string_view value = rest.substr(name.size(), rest.find("\r\n") - name.size());
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    return value;
  }
  return {};
}

bool equals_lower(std::string_view value, std::string_view lower) {
  return value.size() == lower.size() && std::equal(value.begin(), value.end(), lower.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         });
}

// One keep-alive connection: request, delay, answer, until the peer closes,
// asks to close, or sends something this backend does not take.
void serve(int fd, std::chrono::milliseconds delay) {
  std::string buffer;
  buffer.reserve(4096);
  char chunk[4096];
  std::size_t body_left = 0;  // of the request whose head was answered
  for (;;) {
    std::size_t end;
    while ((end = buffer.find("\r\n\r\n")) == std::string::npos || body_left > 0) {
      if (body_left > 0) {
        const std::size_t skip = std::min(body_left, buffer.size());
        buffer.erase(0, skip);
        body_left -= skip;
        if (body_left == 0) continue;
      }
      if (buffer.size() > kMaxRequestBytes) {
        write_all(fd, kTooLarge);
        return;
      }
      const ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n == 0) return;
      if (n < 0) {
        if (errno == EINTR) continue;
        return;
      }
      buffer.append(chunk, static_cast<std::size_t>(n));
    }
    const std::string_view head(buffer.data(), end + 2);
    const bool close = equals_lower(header(head, "connection:"), "close");
    const std::string_view length = header(head, "content-length:");
    std::size_t body = 0;
    for (const char c : length) {
      if (c < '0' || c > '9') break;
      body = body * 10 + static_cast<std::size_t>(c - '0');
    }
    buffer.erase(0, end + 4);
    body_left = body;
    weft::this_fiber::sleep_for(delay);
    if (!write_all(fd, close ? kOkClose : kOk) || close) return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0;
  unsigned delay_ms = 100, threads = 4096;
  weft::RunMode mode = weft::RunMode::fibers;
  std::string pool_mode = "fibers";
  CLI::App app{"backend: the gateway benchmark's HTTP backend, plain blocking code on a weft::Pool", "backend"};
  weft::bench::add_count(app, "--port", port, 1, 65535, "port on 127.0.0.1")->required();
  weft::bench::add_count(app, "--delay-ms", delay_ms, 0u, 60'000u, "delay before each answer");
  weft::bench::add_count(app, "--threads", threads, 1u, 100'000u, "the pool's size: connections served at once");
  app.add_option("--pool", pool_mode, "fibers, or threads for std::threads")
      ->check(CLI::IsMember({"fibers", "threads"}))
      ->capture_default_str();
  weft::bench::parse(app, argc, argv);
  mode = pool_mode == "fibers" ? weft::RunMode::fibers : weft::RunMode::threads;
  weft::bench::raise_fd_limit();

  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) weft::bench::die_errno(kProgram, "socket");
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const sockaddr_in addr = weft::bench::loopback(static_cast<std::uint16_t>(port));
  if (::bind(listener, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    std::fprintf(stderr, "%s: cannot listen on 127.0.0.1:%d: %s\n", kProgram, port, std::strerror(errno));
    return 1;
  }
  // Room for 1,000 connections arriving at once (the kernel caps it at
  // net.core.somaxconn).
  if (::listen(listener, 4096) != 0) weft::bench::die_errno(kProgram, "listen");

  // SIGINT and SIGTERM stop accepting, shut every connection down, and let
  // the pool join its tasks.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  weft::bench::Connections connections;
  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    connections.stop();
    ::shutdown(listener, SHUT_RDWR);
  });

  weft::Pool pool{{.name = "backend", .threads = threads, .mode = mode}};
  std::fprintf(stderr, "%s: pool \"backend\" of %u on %s\n", kProgram, threads,
               pool.runs_on_fibers() ? "fibers" : "threads");
  const auto delay = std::chrono::milliseconds(delay_ms);
  for (;;) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {  // out of descriptors: back off rather than spin
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      break;  // EINVAL after the stop's shutdown of the listener
    }
    weft::bench::set_nodelay(fd);
    if (!connections.add(fd)) {
      ::close(fd);
      continue;
    }
    pool.post([fd, delay, &connections] {
      serve(fd, delay);
      connections.close(fd);
    });
  }
  stopper.join();
  pool.shutdown();
  ::close(listener);
  return 0;
}
