#include "description_sharing.h"

#include <pthread.h>
#include <weft/detail/spin_lock.h>

#include <atomic>

#include "signal_handlers.h"

namespace weft::detail {
namespace {

// The process's forks and spawns (posix_spawn, vfork) that have returned;
// a record keeps the counts from when its description was made.
constinit std::atomic<std::uint32_t> forks{0};
constinit std::atomic<std::uint32_t> spawns{0};
// Forks and spawns under way: between their start and their count, no
// description is private (a child may be taking it).
constinit std::atomic<std::uint32_t> children_in_flight{0};
// Flips between FlipWindow's check and their end.
constinit std::atomic<std::uint32_t> flips_in_flight{0};
// This thread's shares of the two: what a fork child, whose only thread
// is the forking one, keeps of them (a fork made by a signal handler may
// have interrupted a spawn or a flip of its thread, which then ends in the
// child). Initial-exec: read in fork handlers and signal handlers.
[[gnu::tls_model("initial-exec")]] constinit thread_local std::uint32_t own_children_in_flight = 0;
[[gnu::tls_model("initial-exec")]] constinit thread_local std::uint32_t own_flips_in_flight = 0;

// A fork or spawn begins: every flip that started before and may have
// seen no child in flight ends first (each lasts one non-blocking call).
// Pairs with FlipWindow: either the flip reads children_in_flight moved,
// or this reads the flip in flight and waits for it (both seq_cst). A fork
// made by a signal handler waits for none: it may have interrupted a flip
// of its own thread, which holds the record's flip lock, and another
// thread's flip of the same record waits for that lock inside its window.
// So a flip in flight on another thread can meet such a fork's child.
void child_begins() noexcept {
  ++own_children_in_flight;
  children_in_flight.fetch_add(1, std::memory_order_seq_cst);
  if (in_signal_handler()) return;
  while (flips_in_flight.load(std::memory_order_seq_cst) != 0) yield_thread();
}

// The call has returned: a description made before now may be the
// child's. Counted only now, so that one another thread made while the
// call was under way counts as made before it.
void child_made(std::atomic<std::uint32_t>& count) noexcept {
  count.fetch_add(1, std::memory_order_seq_cst);
  children_in_flight.fetch_sub(1, std::memory_order_seq_cst);
  --own_children_in_flight;
}

void before_fork() noexcept { child_begins(); }
void after_fork_in_parent() noexcept { child_made(forks); }
// The child's other threads are gone, and their forks, spawns and flips
// with them; this thread's own go on, the fork itself ends here.
void after_fork_in_child() noexcept {
  forks.fetch_add(1, std::memory_order_seq_cst);
  --own_children_in_flight;
  children_in_flight.store(own_children_in_flight, std::memory_order_seq_cst);
  flips_in_flight.store(own_flips_in_flight, std::memory_order_seq_cst);
}

[[gnu::constructor]] void register_fork_handler() {
  pthread_atfork(&before_fork, &after_fork_in_parent, &after_fork_in_child);
}

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
  // Set after a spawn began that did not have it (one under way may have
  // copied the fd table already): that child holds it. The spawns in
  // flight are read first: one that ends between the two reads has
  // counted itself by the second.
  if (!on || (children_in_flight.load(std::memory_order_seq_cst) == 0 &&
              record->made_at_spawns.load(std::memory_order_relaxed) == spawns.load(std::memory_order_seq_cst)))
    record->set_bit(FdRecord::cloexec_bit, on);
}

Privacy description_privacy(const FdRecord& record) noexcept {
  const std::uint32_t flags = record.flags.load(std::memory_order_relaxed);
  if (!(flags & FdRecord::made_here_bit)) return Privacy::shared;
  // First, as in cloexec_changed: a fork or spawn that ends after this read
  // has counted itself by the reads below.
  if (children_in_flight.load(std::memory_order_seq_cst) != 0) return Privacy::child_under_way;
  if (record.made_at_forks.load(std::memory_order_relaxed) != forks.load(std::memory_order_seq_cst))
    return Privacy::shared;
  const bool spawned_since =
      record.made_at_spawns.load(std::memory_order_relaxed) != spawns.load(std::memory_order_seq_cst);
  return (flags & FdRecord::cloexec_bit) || !spawned_since ? Privacy::private_ : Privacy::shared;
}

FlipWindow::FlipWindow(const FdRecord& record) noexcept {
  ++own_flips_in_flight;
  flips_in_flight.fetch_add(1, std::memory_order_seq_cst);
  privacy_ = description_privacy(record);
}

FlipWindow::~FlipWindow() {
  flips_in_flight.fetch_sub(1, std::memory_order_seq_cst);
  --own_flips_in_flight;
}

void child_spawning() noexcept { child_begins(); }

void child_spawned() noexcept { child_made(spawns); }

}  // namespace weft::detail
