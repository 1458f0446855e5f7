#include "description_sharing.h"

#include <pthread.h>
#include <weft/detail/spin_lock.h>

#include <atomic>

#include "../sched/child_parent.h"
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
// Set in the child of a fork made by a signal handler, or made while its
// thread was between the halves of a flip or of another fork or spawn
// (each a count and a change of the two above; OwnSteps below): there the
// two cannot be told, and no description is private.
constinit std::atomic<bool> counts_unknown{false};

// The calling thread's own flips, and its own forks and spawns, under way:
// between their first count above and their last. A handler that weft's
// trampolines do not count (one installed by a raw rt_sigaction after
// load: Go's runtime, a crash reporter's own system calls) may fork while
// its thread is in one: that fork must not wait for the flip its own
// thread holds, and its child cannot tell the halves of either. Initial-
// exec: read in such a handler. Raised before the shared counts and
// lowered after them (relaxed: the same thread reads them; the signal
// fences keep the order against its handlers), so that a handler never
// sees this thread's step in the shared counts without its own.
struct OwnSteps {
  std::atomic<unsigned> flips{0};
  std::atomic<unsigned> children{0};
};
[[gnu::tls_model("initial-exec")]] constinit thread_local OwnSteps own_steps;

void step_begins(std::atomic<unsigned>& steps) noexcept {
  steps.store(steps.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

void step_ends(std::atomic<unsigned>& steps) noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  steps.store(steps.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

// Whether waiting for the flips in flight could mean waiting for one of
// this thread's own, which it interrupted to get here: in a signal
// handler, counted or not.
bool own_flip_may_be_pending() noexcept {
  return in_signal_handler() || own_steps.flips.load(std::memory_order_relaxed) != 0;
}

// A fork or spawn begins: every flip that started before and may have
// seen no child in flight ends first (each lasts one non-blocking call).
// Pairs with FlipWindow: either the flip reads children_in_flight moved,
// or this reads the flip in flight and waits for it (both seq_cst). A fork
// made by a signal handler, or while its thread is inside a flip of its
// own, waits for none: that flip holds the record's flip lock, and another
// thread's flip of the same record waits for that lock inside its window.
// So a flip in flight on another thread can meet such a fork's child.
void child_begins() noexcept {
  const bool no_wait = own_flip_may_be_pending();
  step_begins(own_steps.children);
  children_in_flight.fetch_add(1, std::memory_order_seq_cst);
  if (no_wait || counts_unknown.load(std::memory_order_relaxed)) return;
  while (flips_in_flight.load(std::memory_order_seq_cst) != 0) yield_thread();
}

// The call has returned: a description made before now may be the
// child's. Counted only now, so that one another thread made while the
// call was under way counts as made before it.
void child_made(std::atomic<std::uint32_t>& count) noexcept {
  note_child_made();  // this thread is the child's parent: it stays (sched/child_parent.h)
  count.fetch_add(1, std::memory_order_seq_cst);
  children_in_flight.fetch_sub(1, std::memory_order_seq_cst);
  step_ends(own_steps.children);
}

void before_fork() noexcept { child_begins(); }
void after_fork_in_parent() noexcept { child_made(forks); }
// The child's other threads are gone, and their forks, spawns and flips
// with them. The forking thread was in none but this fork, unless it
// forked from a signal handler or inside a flip, fork or spawn of its own
// (a vfork child's fork too): counts_unknown, since that step ends in this
// child too, against counts it no longer holds.
void after_fork_in_child() noexcept {
  forks.fetch_add(1, std::memory_order_seq_cst);
  children_in_flight.store(0, std::memory_order_seq_cst);
  flips_in_flight.store(0, std::memory_order_seq_cst);
  step_ends(own_steps.children);
  if (own_flip_may_be_pending() || own_steps.children.load(std::memory_order_relaxed) != 0)
    counts_unknown.store(true, std::memory_order_seq_cst);
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
  if (!(flags & FdRecord::made_here_bit) || counts_unknown.load(std::memory_order_relaxed)) return Privacy::shared;
  // A fork or spawn since: for good (the counts only grow, and FD_CLOEXEC
  // set after a spawn is not taken for set before it).
  const auto child_since = [&] {
    return record.made_at_forks.load(std::memory_order_relaxed) != forks.load(std::memory_order_seq_cst) ||
           (!(flags & FdRecord::cloexec_bit) &&
            record.made_at_spawns.load(std::memory_order_relaxed) != spawns.load(std::memory_order_seq_cst));
  };
  if (child_since()) return Privacy::shared;
  if (children_in_flight.load(std::memory_order_seq_cst) != 0) return Privacy::child_under_way;
  // Again, after the read above, as in cloexec_changed: a fork or spawn
  // that ended between the two has counted itself.
  return child_since() ? Privacy::shared : Privacy::private_;
}

FlipWindow::FlipWindow(const FdRecord& record) noexcept {
  step_begins(own_steps.flips);
  flips_in_flight.fetch_add(1, std::memory_order_seq_cst);
  privacy_ = description_privacy(record);
}

FlipWindow::~FlipWindow() {
  flips_in_flight.fetch_sub(1, std::memory_order_seq_cst);
  step_ends(own_steps.flips);
}

void child_spawning() noexcept { child_begins(); }

void child_spawned() noexcept { child_made(spawns); }

}  // namespace weft::detail
