// What a plain thread that sleeps in a weft primitive waits on (a weft::Mutex
// or a weft::BlockingQueue used from a std::thread): park() records it
// around its futex wait, so that weft-dump can name the primitive behind a
// thread's `futex(0x...)`. Any layer that puts a thread to sleep on a futex
// of its own may record it the same way (the libc lock hooks: std::mutex).
#pragma once

#include <atomic>

namespace weft::detail {

struct ThreadWait {
  std::atomic<const char*> kind{nullptr};  // null: not waiting
  std::atomic<const void*> object{nullptr};
  std::atomic<const char*> operation{nullptr};
  std::atomic<const void*> futex{nullptr};  // the word it sleeps on
};

// The calling thread's record. It lives as long as the thread.
ThreadWait& this_thread_wait() noexcept;

// Records, for the scope's duration, that the calling thread waits on
// `kind`/`object`/`operation`, sleeping on `futex`.
class ThreadWaitScope {
 public:
  ThreadWaitScope(const char* kind, const void* object, const char* operation, const void* futex) noexcept
      : wait_(this_thread_wait()) {
    wait_.object.store(object, std::memory_order_relaxed);
    wait_.operation.store(operation, std::memory_order_relaxed);
    wait_.futex.store(futex, std::memory_order_relaxed);
    wait_.kind.store(kind, std::memory_order_release);
  }
  ~ThreadWaitScope() { wait_.kind.store(nullptr, std::memory_order_release); }
  ThreadWaitScope(const ThreadWaitScope&) = delete;
  ThreadWaitScope& operator=(const ThreadWaitScope&) = delete;

 private:
  ThreadWait& wait_;
};

}  // namespace weft::detail
