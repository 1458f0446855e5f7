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
// snapshot could be reported; a real deadlock stays, and the next dump
// shows it again.
#pragma once

#include <weft/snapshot.h>

#include <vector>

namespace weft::detail {

// Every cycle among the fibers of all of `process`'s schedulers, each once,
// starting from its lowest fiber id; in the order of those ids.
std::vector<DeadlockSnapshot> find_deadlocks(const ProcessSnapshot& process);

}  // namespace weft::detail
