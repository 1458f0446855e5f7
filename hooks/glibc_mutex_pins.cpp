#include "glibc_mutex_pins.h"

#include <weft/fiber_local.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <vector>

#include "../sched/current.h"
#include "../sched/wait_owner.h"
#include "../sync/parking_lot.h"
#include "hook_support.h"
#include "locks.h"
#include "signal_handlers.h"

namespace weft::detail::locks {
namespace {

// The calling fiber's count of pins for glibc locks, kept in a fiber-
// local slot as an integer (no allocation but the slot table's own).
const std::size_t held_slot = allocate_fiber_local_slot();

// The slot's destructor, run by the fiber as it ends: a fiber that ends
// holding such a lock gives its pins back, so that its worker's count of
// pinned fibers stays true (the lock stays held, as a thread's would, and
// so does its record: the other fibers of the thread wait for it, as
// threads wait for a mutex whose owner exited).
void unpin_at_end(void* value) noexcept {
  FiberControl* fiber = current_fiber();
  for (auto held = reinterpret_cast<std::uintptr_t>(value); held != 0 && fiber != nullptr; --held)
    unpin_current(*fiber);
}

// This thread's glibc locks held by its fibers (few: a vector).
struct Holder {
  const void* object;
  std::uint64_t fiber_id;
  // Set by a fiber about to wait for this holder (wait_for_holder_beside),
  // so that an unlock nobody waited for skips the parking lot. Both run on
  // this thread, one at a time.
  bool waited_for = false;
};
thread_local std::vector<Holder> holders;

Holder* holder_of(const void* object) noexcept {
  const auto found =
      std::find_if(holders.begin(), holders.end(), [object](const Holder& h) { return h.object == object; });
  return found != holders.end() ? &*found : nullptr;
}

// The wait for a holder beside the waiter, as weft-dump names it.
constexpr const char* kWaitKind = "glibc mutex";

// Who holds what a fiber waits for here, for weft-dump (sched/wait_owner.h):
// the record is its thread's, which the dump's thread cannot read, so each
// waiter publishes its holder in a slot of this table while it is parked.
// A waiter that finds every slot taken leaves its holder unnamed.
struct NamedHolder {
  std::atomic<std::uint64_t> fiber{0};  // 0: free; the claim
  std::atomic<const void*> object{nullptr};
};
constexpr std::size_t kNamedHolders = 64;
constinit NamedHolder named_holders[kNamedHolders];

class HolderNamed {
 public:
  HolderNamed(const void* object, std::uint64_t holder) noexcept {
    for (NamedHolder& entry : named_holders) {
      std::uint64_t free = 0;
      if (entry.fiber.compare_exchange_strong(free, holder, std::memory_order_relaxed)) {
        entry.object.store(object, std::memory_order_release);
        entry_ = &entry;
        return;
      }
    }
  }
  HolderNamed(const HolderNamed&) = delete;
  HolderNamed& operator=(const HolderNamed&) = delete;
  ~HolderNamed() {
    if (entry_ == nullptr) return;
    entry_->object.store(nullptr, std::memory_order_relaxed);
    entry_->fiber.store(0, std::memory_order_release);
  }

 private:
  NamedHolder* entry_ = nullptr;
};

// The lookup: a hint, as every lookup's (a slot may be reused between its
// two reads, which the second read of `object` mostly catches).
WaitOwner named_holder(const void* object) noexcept {
  for (NamedHolder& entry : named_holders) {
    if (entry.object.load(std::memory_order_acquire) != object) continue;
    const std::uint64_t fiber = entry.fiber.load(std::memory_order_relaxed);
    if (fiber != 0 && entry.object.load(std::memory_order_relaxed) == object) return {fiber, 0, 0};
  }
  return {};
}

[[maybe_unused]] const bool holders_registered = register_wait_owner(kWaitKind, &named_holder);

}  // namespace

FiberControl* glibc_lock_keeper() noexcept {
  // In a signal handler, glibc's call as it is (docs/io.md, "Signal
  // handlers"): a park there would switch away from the interrupted code,
  // and the record may allocate.
  return in_signal_handler() ? nullptr : pinnable_fiber();
}

Holding holding(const FiberControl* me, const void* object) noexcept {
  const Holder* holder = me != nullptr ? holder_of(object) : nullptr;
  if (holder == nullptr) return Holding::none;
  return holder->fiber_id == me->id ? Holding::caller : Holding::other_fiber;
}

int wait_for_holder_beside(const FiberControl* me, const void* object, const Deadline* deadline) noexcept {
  if (holding(me, object) != Holding::other_fiber) return 0;
  if (deadline == nullptr) return EBUSY;
  if (const int error = deadline->check(); error != 0) return error;
  if (!glibc_waits_on(deadline->clock)) return EINVAL;
  // Parked on the hooks' pin: the holder runs on this thread only, and
  // this fiber looks at this thread's record when it wakes.
  const WaitingCall call(Waits::park);
  LotBucket& bucket = lot_bucket(object);
  for (;;) {
    LotWaiter waiter;
    waiter.key = object;
    bucket.lock.lock();
    Holder* holder = holder_of(object);
    if (holder == nullptr || holder->fiber_id == me->id) {
      bucket.lock.unlock();
      return 0;
    }
    holder->waited_for = true;
    const HolderNamed named(object, holder->fiber_id);
    bucket.push(waiter);
    if (!wait_in_lot(bucket, waiter, {kWaitKind, object, "held by a fiber of this thread"}, *deadline, true)) {
      std::lock_guard guard(bucket.lock);
      bucket.remove(waiter);
      // Let go just as the deadline passed: taken.
      return holding(me, object) == Holding::other_fiber ? ETIMEDOUT : 0;
    }
  }
}

int pin_if_held(FiberControl* me, int result, const void* object) noexcept {
  if ((result != 0 && result != EOWNERDEAD) || me == nullptr) return result;
  const bool recorded = holder_of(object) != nullptr;
  try {
    if (!recorded) holders.push_back({object, me->id});
    const auto held = reinterpret_cast<std::uintptr_t>(fiber_local_get(held_slot));
    fiber_local_set(held_slot, reinterpret_cast<void*>(held + 1), &unpin_at_end);
  } catch (...) {
    // No room for the count (std::bad_alloc): left unpinned and
    // unrecorded, as before the record (a record without a pin would let
    // the holder move while the thread's other fibers wait for it).
    if (!recorded && !holders.empty() && holders.back().object == object) holders.pop_back();
    return result;
  }
  pin_current(*me);
  return result;
}

int unpin_if_released(FiberControl* me, int result, const void* object, bool still_owned) noexcept {
  if (result != 0 || me == nullptr) return result;
  Holder* holder = holder_of(object);
  if (holder == nullptr) return result;
  // Only the holder's pin goes: an unlock glibc lets another fiber of the
  // thread make (a normal mutex's, which it does not check) must not take
  // a pin that keeps that fiber on its thread for a lock of its own.
  const bool callers = holder->fiber_id == me->id;
  if (!still_owned) {
    const bool waited_for = holder->waited_for;
    *holder = holders.back();
    holders.pop_back();
    if (waited_for) {
      LotBucket& bucket = lot_bucket(object);
      std::lock_guard guard(bucket.lock);
      while (LotWaiter* waiter = bucket.first(object)) {
        bucket.remove(*waiter);
        unpark(*waiter);
      }
    }
  }
  if (!callers) return result;
  const auto held = reinterpret_cast<std::uintptr_t>(fiber_local_get(held_slot));
  if (held == 0) return result;
  fiber_local_set(held_slot, reinterpret_cast<void*>(held - 1), &unpin_at_end);  // within the table: no allocation
  unpin_current(*me);
  return result;
}

}  // namespace weft::detail::locks
