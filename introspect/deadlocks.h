// Deadlock detection for weft-dump, as jstack's "Found one Java-level
// deadlock": the wait-for graph has an edge from each parked fiber to the
// fiber that holds what it waits on (FiberSnapshot::held_by_fiber, from
// sched/wait_owner.h: a weft::Mutex's holder, a joined fiber, a std::mutex
// once the lock hooks say who holds it), and every cycle of it is a set of
// fibers that can never run again on their own.
//
// A fiber waits on one thing, so each node has at most one edge out: the
// graph is a functional graph, whose cycles one walk from every node finds
// (each node is visited once). The edges are read one fiber at a time,
// not at one instant, so a cycle that closes and opens again within the
// snapshot can look like a cycle: a lock handed from fiber to fiber names
// its next holder before that fiber is woken (which then looks parked on
// what it holds), and edges read while the holder changes chain into
// rings. So a cycle found is only a candidate: its members' waits are
// read again a moment later (read_waits, introspect/snapshot.h; and once
// more, later, for a cycle with a member waiting for itself), and the
// cycle is reported only if each member is still parked on the same
// object, held by the same fiber, one member at least (and a fiber that
// waits for what it holds itself) still in the same park (its park
// count). A real deadlock stays, and passes (also one whose member parks
// again and again, a timed try_lock in a loop, beside one that waits
// without end); a hand-over has woken its fiber by then, and fibers that
// time out, let go and try again have all parked anew.
#pragma once

#include <weft/snapshot.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace weft::detail {

// A parked fiber's wait: what a cycle's member is seen waiting on, in the
// snapshot and when read again to confirm it.
struct FiberWait {
  std::uint64_t parks = 0;  // FiberCounts::park
  const void* object = nullptr;
  std::uint64_t holder = 0;  // held_by_fiber
};
using FiberWaits = std::unordered_map<std::uint64_t, FiberWait>;  // by fiber id

// A cycle found, and each member's wait as the snapshot saw it.
struct DeadlockCandidate {
  DeadlockSnapshot cycle;
  FiberWaits seen;
};

// Every cycle among the fibers of all of `process`'s schedulers, each once,
// starting from its lowest fiber id; in the order of those ids. Cycles in
// which two members wait on one object are left out: an object with two
// holders is one whose edges were read at different times (a shared
// lock's readers give no edges).
std::vector<DeadlockCandidate> find_deadlocks(const ProcessSnapshot& process);

// Whether every member of `candidate` waits in `now` as it was seen; a
// member missing from `now` (no longer parked) breaks its cycle.
bool waits_as_seen(const DeadlockCandidate& candidate, const FiberWaits& now);

// Whether a member of `candidate` waits for what it holds itself: a real
// deadlock (a fiber locking a mutex it holds), or a hand-over whose waker
// named it the holder and has not woken it yet. The waker is mostly that
// quick, but one descheduled just then is held up for as long as the
// machine keeps it off a CPU: such a cycle is looked at once more, later.
bool waits_for_itself(const DeadlockCandidate& candidate);

}  // namespace weft::detail
