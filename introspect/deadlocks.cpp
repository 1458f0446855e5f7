#include "deadlocks.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

namespace weft::detail {

namespace {

// The parked fibers that wait for a fiber, by id.
std::unordered_map<std::uint64_t, const FiberSnapshot*> waiting_fibers(const ProcessSnapshot& process) {
  std::unordered_map<std::uint64_t, const FiberSnapshot*> waiting;
  for (const SchedulerSnapshot& scheduler : process.schedulers)
    for (const FiberSnapshot& fiber : scheduler.fibers)
      if (fiber.park_state == -1 && fiber.held_by_fiber != 0) waiting.emplace(fiber.id, &fiber);
  return waiting;
}

bool two_members_wait_on_one_object(const DeadlockSnapshot& cycle,
                                    const std::unordered_map<std::uint64_t, const FiberSnapshot*>& waiting) {
  std::vector<const void*> objects;
  for (const std::uint64_t member : cycle.fibers) objects.push_back(waiting.at(member)->wait_object);
  std::sort(objects.begin(), objects.end());
  return std::adjacent_find(objects.begin(), objects.end()) != objects.end();
}

}  // namespace

std::vector<DeadlockSnapshot> find_deadlocks(const ProcessSnapshot& process) {
  // Each fiber's edge: the fiber it waits for, if it is parked on something
  // a live fiber holds.
  const auto waiting = waiting_fibers(process);
  std::unordered_map<std::uint64_t, std::uint64_t> waits_for;
  for (const auto& [id, fiber] : waiting) waits_for.emplace(id, fiber->held_by_fiber);
  // 0: not visited; otherwise the number of the walk that first reached it.
  std::unordered_map<std::uint64_t, unsigned> walk_of;
  std::vector<std::uint64_t> starts;
  starts.reserve(waits_for.size());
  for (const auto& [fiber, owner] : waits_for) starts.push_back(fiber);
  std::sort(starts.begin(), starts.end());
  std::vector<DeadlockSnapshot> cycles;
  unsigned walk = 0;
  for (const std::uint64_t start : starts) {
    if (walk_of.count(start) != 0) continue;
    ++walk;
    std::uint64_t at = start;
    // Follow the edges until a fiber waits for nobody we know, or we reach
    // a fiber seen before: in this walk, that closes a new cycle; in an
    // earlier one, whatever it leads to was reported then.
    for (;;) {
      const auto seen = walk_of.find(at);
      if (seen != walk_of.end()) {
        if (seen->second == walk) {
          DeadlockSnapshot cycle;
          std::uint64_t member = at;
          do {
            cycle.fibers.push_back(member);
            member = waits_for.at(member);
          } while (member != at);
          // From its lowest id, keeping the order of the waits.
          std::rotate(cycle.fibers.begin(), std::min_element(cycle.fibers.begin(), cycle.fibers.end()),
                      cycle.fibers.end());
          if (!two_members_wait_on_one_object(cycle, waiting)) cycles.push_back(std::move(cycle));
        }
        break;
      }
      walk_of.emplace(at, walk);
      const auto next = waits_for.find(at);
      if (next == waits_for.end()) break;
      at = next->second;
    }
  }
  std::sort(cycles.begin(), cycles.end(),
            [](const DeadlockSnapshot& a, const DeadlockSnapshot& b) { return a.fibers.front() < b.fibers.front(); });
  return cycles;
}

std::vector<DeadlockSnapshot> confirmed_deadlocks(const ProcessSnapshot& process, std::vector<DeadlockSnapshot> cycles,
                                                  const FiberWaits& now) {
  const auto waiting = waiting_fibers(process);
  const auto still_waits = [&](std::uint64_t member) {
    const FiberSnapshot& then = *waiting.at(member);
    const auto seen = now.find(member);
    if (seen == now.end() || seen->second.object != then.wait_object || seen->second.holder != then.held_by_fiber)
      return false;
    // Waiting for what it holds itself: a real one stays in its park; a
    // lock handed to it again and again looks so for a moment each time.
    return then.held_by_fiber != member || seen->second.parks == then.counts.park;
  };
  std::erase_if(cycles, [&](const DeadlockSnapshot& cycle) {
    return !std::all_of(cycle.fibers.begin(), cycle.fibers.end(), still_waits);
  });
  return cycles;
}

}  // namespace weft::detail
