#include "deadlocks.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>

namespace weft::detail {

std::vector<DeadlockSnapshot> find_deadlocks(const ProcessSnapshot& process) {
  // Each fiber's edge: the fiber it waits for, if it is parked on something
  // a live fiber holds.
  std::unordered_map<std::uint64_t, std::uint64_t> waits_for;
  for (const SchedulerSnapshot& scheduler : process.schedulers)
    for (const FiberSnapshot& fiber : scheduler.fibers)
      if (fiber.park_state == -1 && fiber.held_by_fiber != 0) waits_for.emplace(fiber.id, fiber.held_by_fiber);
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
          cycles.push_back(std::move(cycle));
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

}  // namespace weft::detail
