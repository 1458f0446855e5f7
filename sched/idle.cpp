#include "idle.h"

#include <sched.h>

#include <algorithm>
#include <mutex>

#include "futex.h"
#include "idle_poller.h"

namespace weft::detail {

bool IdleWorkers::begin_search() noexcept {
  unsigned searching = searching_.load(std::memory_order_relaxed);
  do {
    if (2 * searching >= workers_ && workers_ > 1) return false;
  } while (!searching_.compare_exchange_weak(searching, searching + 1, std::memory_order_seq_cst));
  return true;
}

void IdleWorkers::reserve_sleepers(unsigned sleepers) {
  std::lock_guard guard(lock_);
  sleepers_.reserve(sleepers);
}

void IdleWorkers::prepare_sleep(IdleSlot& slot) noexcept {
  slot.wake_word.store(0, std::memory_order_relaxed);
  const int cpu = sched_getcpu();
  {
    std::lock_guard guard(lock_);
    slot.cpu = cpu;
    slot.listed = true;
    sleepers_.push_back(&slot);
    sleeping_.fetch_add(1, std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool IdleWorkers::begin_poll(IdleSlot& slot) noexcept {
  std::lock_guard guard(lock_);
  // Unlisted: a waker took this slot and stored its wake word, which the
  // epoll_wait would not see.
  if (!slot.listed) return false;
  slot.polling = true;
  return true;
}

bool IdleWorkers::cancel_sleep(IdleSlot& slot) noexcept {
  std::lock_guard guard(lock_);
  slot.polling = false;
  if (!slot.listed) return true;  // already woken: the wake is absorbed here
  slot.listed = false;
  sleepers_.erase(std::find(sleepers_.begin(), sleepers_.end(), &slot));
  sleeping_.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

void IdleWorkers::wait(IdleSlot& slot) noexcept {
  while (slot.wake_word.load(std::memory_order_acquire) == 0) futex_wait(slot.wake_word, 0);
}

bool IdleWorkers::take_locked(IdleSlot& slot) noexcept {
  slot.listed = false;
  sleeping_.fetch_sub(1, std::memory_order_relaxed);
  slot.wake_word.store(1, std::memory_order_release);
  // A polling slot sleeps in epoll_wait, marked under this lock (begin_poll).
  return slot.polling;
}

void IdleWorkers::wake_unlocked(IdleSlot& slot, bool polling) noexcept {
  if (polling)
    poller_->wake();
  else
    futex_wake(slot.wake_word);
}

void IdleWorkers::wake_one() noexcept {
  const int here = sched_getcpu();
  IdleSlot* slot;
  bool polling;
  {
    std::lock_guard guard(lock_);
    if (sleepers_.empty()) return;
    // The most recent futex sleeper from another CPU, else the most recent
    // futex sleeper (see the header); the polling one only when it is the
    // last, since it watches the fds where it is.
    const auto newest = sleepers_.rbegin(), none = sleepers_.rend();
    const auto newest_futex = std::find_if(newest, none, [](const IdleSlot* s) { return !s->polling; });
    const auto elsewhere =
        std::find_if(newest_futex, none, [here](const IdleSlot* s) { return !s->polling && s->cpu != here; });
    const auto chosen = elsewhere != none ? elsewhere : newest_futex != none ? newest_futex : newest;
    const auto it = std::next(chosen).base();
    slot = *it;
    sleepers_.erase(it);
    polling = take_locked(*slot);
  }
  wake_unlocked(*slot, polling);
}

void IdleWorkers::notify_worker(IdleSlot& slot) noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_relaxed) == 0) return;
  bool polling;
  {
    std::lock_guard guard(lock_);
    if (!slot.listed) return;
    sleepers_.erase(std::find(sleepers_.begin(), sleepers_.end(), &slot));
    polling = take_locked(slot);
  }
  wake_unlocked(slot, polling);
}

void IdleWorkers::wake_all() noexcept {
  // Rare (stopping, shutdown): the calls are made under the lock, which
  // saves copying the list.
  std::lock_guard guard(lock_);
  for (IdleSlot* slot : sleepers_) wake_unlocked(*slot, take_locked(*slot));
  sleepers_.clear();
}

}  // namespace weft::detail
