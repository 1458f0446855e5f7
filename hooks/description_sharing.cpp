#include "description_sharing.h"

#include <pthread.h>
#include <weft/detail/spin_lock.h>

#include <atomic>

#include "signal_handlers.h"

namespace weft::detail {
namespace {

// The process's forks and posix_spawns so far; a record keeps the counts
// from when its description was made.
constinit std::atomic<std::uint32_t> forks{0};
constinit std::atomic<std::uint32_t> spawns{0};
// Flips between FlipWindow's check and their end.
constinit std::atomic<std::uint32_t> flips_in_flight{0};

// After a fork or spawn was counted: until every flip that may have missed
// the count has ended. Each lasts one non-blocking call. (A fork made by a
// signal handler may have interrupted a flip of its own thread: it cannot
// wait for that one.)
void wait_for_flips() noexcept {
  if (in_signal_handler()) return;
  while (flips_in_flight.load(std::memory_order_seq_cst) != 0) yield_thread();
}

void before_fork() noexcept {
  // Pairs with FlipWindow: either the flip reads this count, or this reads
  // the flip in flight and waits for it (both seq_cst).
  forks.fetch_add(1, std::memory_order_seq_cst);
  wait_for_flips();
}

// In the parent and in the child: a description made between before_fork
// and the system call (by another thread, while this one waited for a
// flip or ran the other fork handlers) took the first count for its own,
// and the child holds it.
void after_fork() noexcept { forks.fetch_add(1, std::memory_order_seq_cst); }

[[gnu::constructor]] void register_fork_handler() { pthread_atfork(&before_fork, &after_fork, &after_fork); }

}  // namespace

DescriptionBirth description_birth(bool cloexec) noexcept {
  return {forks.load(std::memory_order_seq_cst), spawns.load(std::memory_order_seq_cst), cloexec};
}

void description_made_here(FdRecord& record, const DescriptionBirth& birth) noexcept {
  record.made_at_forks.store(birth.forks, std::memory_order_relaxed);
  record.made_at_spawns.store(birth.spawns, std::memory_order_relaxed);
  record.set_bit(FdRecord::cloexec_bit, birth.cloexec);
  record.set_bit(FdRecord::made_here_bit, true);
}

void description_passed(FdRecord* record) noexcept {
  if (record != nullptr) record->set_bit(FdRecord::made_here_bit, false);
}

void cloexec_changed(FdRecord* record, bool on) noexcept {
  if (record == nullptr) return;
  // Set after a spawn that did not have it: that child holds it already.
  if (!on || record->made_at_spawns.load(std::memory_order_relaxed) == spawns.load(std::memory_order_relaxed))
    record->set_bit(FdRecord::cloexec_bit, on);
}

bool description_private(const FdRecord& record) noexcept {
  const std::uint32_t flags = record.flags.load(std::memory_order_relaxed);
  if (!(flags & FdRecord::made_here_bit)) return false;
  if (record.made_at_forks.load(std::memory_order_relaxed) != forks.load(std::memory_order_seq_cst)) return false;
  return (flags & FdRecord::cloexec_bit) ||
         record.made_at_spawns.load(std::memory_order_relaxed) == spawns.load(std::memory_order_seq_cst);
}

FlipWindow::FlipWindow(const FdRecord& record) noexcept {
  flips_in_flight.fetch_add(1, std::memory_order_seq_cst);
  private_ = detail::description_private(record);
}

FlipWindow::~FlipWindow() { flips_in_flight.fetch_sub(1, std::memory_order_seq_cst); }

void child_spawning() noexcept {
  spawns.fetch_add(1, std::memory_order_seq_cst);
  wait_for_flips();
}

void child_spawned() noexcept { spawns.fetch_add(1, std::memory_order_seq_cst); }

}  // namespace weft::detail
