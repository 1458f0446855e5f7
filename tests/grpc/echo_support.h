// What the gRPC client test and benchmark share (tests/grpc/,
// benchmarks/grpc_unary.cpp): the echo server as a child process on
// 127.0.0.1, and a client's run of unary calls, each reply checked.
#pragma once

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "echo.grpc.pb.h"

extern char** environ;

namespace weft::test {

// tests/grpc/echo_server.cpp, started on a free port of 127.0.0.1 and
// stopped when this goes: its standard input is closed (it shuts down),
// then, after 10 s, it is killed. If this process dies first, the server
// sees its stdin close, or its parent-death signal.
class EchoServerProcess {
 public:
  explicit EchoServerProcess(const char* path) {
    int to_server[2];
    int from_server[2];
    if (::pipe2(to_server, O_CLOEXEC) != 0 || ::pipe2(from_server, O_CLOEXEC) != 0)
      throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_server[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, from_server[1], STDOUT_FILENO);
    char* const argv[] = {const_cast<char*>(path), nullptr};
    const int spawned = posix_spawn(&pid_, path, &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(to_server[0]);
    ::close(from_server[1]);
    stdin_ = to_server[1];
    if (spawned != 0) {
      ::close(from_server[0]);
      pid_ = -1;
      throw std::runtime_error(std::string("cannot start ") + path + ": " + std::strerror(spawned));
    }
    const std::string line = read_line(from_server[0], std::chrono::seconds(60));
    ::close(from_server[0]);
    port_ = std::atoi(line.c_str());
    if (port_ <= 0 || port_ > 65535) {
      stop();
      throw std::runtime_error(std::string(path) + " printed no port (got '" + line + "')");
    }
  }
  EchoServerProcess(const EchoServerProcess&) = delete;
  EchoServerProcess& operator=(const EchoServerProcess&) = delete;
  ~EchoServerProcess() { stop(); }

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  // The first line `fd` gives within `limit`, without its newline.
  static std::string read_line(int fd, std::chrono::seconds limit) {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (line.find('\n') == std::string::npos) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd ready{fd, POLLIN, 0};
      if (::poll(&ready, 1, static_cast<int>(left.count())) <= 0) continue;
      char buffer[64];
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n <= 0) break;
      line.append(buffer, static_cast<std::size_t>(n));
    }
    return line.substr(0, line.find('\n'));
  }

  void stop() {
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
    if (pid_ <= 0) return;
    int status = 0;
    for (int i = 0; i < 1000 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (::waitpid(pid_, &status, WNOHANG) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int stdin_ = -1;
  int port_ = 0;
};

// What a run of calls gave.
struct CallResults {
  std::uint64_t ok = 0;
  std::uint64_t failed = 0;  // a status other than OK, or a reply that is not the request's
  std::string first_error;
};

// `calls` unary calls on `stub`, one after the other, each with a deadline
// of `deadline`; the ids are first_id, first_id + 1...
inline CallResults make_calls(echo::Echo::Stub& stub, std::int64_t first_id, int calls, std::chrono::seconds deadline) {
  CallResults results;
  for (int i = 0; i < calls; ++i) {
    ::grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    echo::EchoRequest request;
    request.set_id(first_id + i);
    request.set_text("call " + std::to_string(first_id + i));
    echo::EchoReply reply;
    const ::grpc::Status status = stub.Say(&context, request, &reply);
    if (status.ok() && reply.id() == request.id() && reply.text() == request.text()) {
      ++results.ok;
      continue;
    }
    ++results.failed;
    if (results.first_error.empty())
      results.first_error = status.ok() ? "call " + std::to_string(request.id()) + ": wrong reply (id " +
                                              std::to_string(reply.id()) + ", '" + reply.text() + "')"
                                        : "call " + std::to_string(request.id()) + ": " + status.error_message() +
                                              " (code " + std::to_string(status.error_code()) + ")";
  }
  return results;
}

}  // namespace weft::test
