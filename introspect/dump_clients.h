// The connections weft-dump's server is serving: one thread each, at most
// kMaxDumpClients at once, so that a client that stalls holds only its own
// thread (docs/dump.md, "How it works"). Joined once done (reap) or when
// the server stops (cut_off).
#pragma once

#include <chrono>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

namespace weft::detail {

constexpr int kMaxDumpClients = 16;

class DumpClients {
 public:
  using Clock = std::chrono::steady_clock;
  // What a client's thread runs; the fd is closed after it returns.
  using Serve = std::function<void(int fd, Clock::time_point accepted)>;

  explicit DumpClients(Serve serve) : serve_(std::move(serve)) {}
  DumpClients(const DumpClients&) = delete;
  DumpClients& operator=(const DumpClients&) = delete;

  // Starts a thread for `fd`; false (and `fd` left to the caller) when
  // kMaxDumpClients are being served or no thread could be started.
  bool admit(int fd, Clock::time_point accepted);
  // Joins the threads of clients that are done.
  void reap();
  // Shuts every connection down, so that their threads end, and joins them.
  void cut_off();

  // fork(): held across it; the child drops the parent's clients, whose
  // threads it does not have.
  void lock() { lock_.lock(); }
  void unlock() { lock_.unlock(); }
  void forget_in_child() noexcept;

 private:
  struct Client {
    std::thread thread;
    int fd;     // -1 once closed
    bool done;  // its thread has left serve_
  };
  void leave(Client& client);  // the last thing a client's thread does

  const Serve serve_;
  std::mutex lock_;  // clients_, and each one's fd and done
  std::list<Client> clients_;
  int active_ = 0;  // of clients_, those not done
};

}  // namespace weft::detail
