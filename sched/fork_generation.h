// Which process an object was made in, for the objects whose threads do
// not survive fork(): a scheduler (its workers) and a pool (its runners).
// The child has only the thread that forked; a copy of such an object
// there must not wait for the parent's threads (docs/usage.md, "fork()").
#pragma once

#include <atomic>

namespace weft::detail {

// How many times this process is a fork()ed child of the process it started
// as: one more in each child, counted by an atfork handler, so that a check
// costs a load, not a getpid() system call per spawn or task. The process's
// own fact, not a registry of objects. Read through ForkGeneration, which
// registers the handler first.
extern std::atomic<unsigned> forks_behind_this_process;

class ForkGeneration {
 public:
  // The count now; registers the atfork handler at the first call.
  // Throws std::system_error if the handler cannot be registered.
  static unsigned now();
  ForkGeneration() : made_at_(now()) {}
  // True in a child forked after this was made.
  bool in_forked_child() const noexcept {
    return forks_behind_this_process.load(std::memory_order_relaxed) != made_at_;
  }

 private:
  unsigned made_at_;
};

}  // namespace weft::detail
