#include "thread_registry.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "../runtime/fast_clock.h"

namespace weft::detail {
namespace {

struct Registry {
  std::mutex lock;  // held while a snapshot reads the threads
  std::vector<ListedThread*> threads;
};

Registry& registry() {
  static Registry* const instance = new Registry;  // never destroyed, as the pools' list
  return *instance;
}

// fork(): the lock is held across it, so that the child's copy of the
// list is whole and its lock free. A thread listed there unlists itself
// at its end (a pool's runner ends in the child of a fork its task made,
// pool/pool.cpp); taken by another thread at the fork (a dump reading the
// list, a thread starting or ending), the child's copy of the lock would
// be held by a thread the child does not have. Called from libweft, the
// lock is libc's own (hooks/locks.h): it blocks, never parks.
[[gnu::constructor]] void register_fork_handlers() {
  pthread_atfork([] { registry().lock.lock(); }, [] { registry().lock.unlock(); }, [] { registry().lock.unlock(); });
}

thread_local ThreadListing* current_listing = nullptr;

}  // namespace

ThreadListing::ThreadListing(std::string name, std::string pool, const char* kind) {
  thread_.name = std::move(name);
  thread_.pool = std::move(pool);
  thread_.kind = kind;
  thread_.tid = static_cast<int>(::gettid());
  thread_.wait = &this_thread_wait();
  pthread_attr_t attributes;
  if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
    void* low = nullptr;
    std::size_t size = 0;
    if (pthread_attr_getstack(&attributes, &low, &size) == 0) {
      thread_.stack_low = reinterpret_cast<std::uintptr_t>(low);
      thread_.stack_high = thread_.stack_low + size;
    }
    pthread_attr_destroy(&attributes);
  }
  current_listing = this;
  Registry& r = registry();
  std::lock_guard guard(r.lock);
  r.threads.push_back(&thread_);
}

ThreadListing::~ThreadListing() {
  current_listing = nullptr;
  Registry& r = registry();
  std::lock_guard guard(r.lock);
  r.threads.erase(std::remove(r.threads.begin(), r.threads.end(), &thread_), r.threads.end());
}

ThreadListing* ThreadListing::current() noexcept { return current_listing; }

void ThreadListing::task_started() noexcept { thread_.task_since_ns.store(fast_now_ns(), std::memory_order_relaxed); }

void ThreadListing::task_finished() noexcept { thread_.task_since_ns.store(0, std::memory_order_relaxed); }

void for_each_listed_thread(const std::function<void(const ListedThread&)>& fn) {
  Registry& r = registry();
  std::lock_guard guard(r.lock);
  for (const ListedThread* thread : r.threads) fn(*thread);
}

}  // namespace weft::detail
