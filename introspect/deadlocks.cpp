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

// The cycle through `at`, from its lowest id, with each member's wait.
DeadlockCandidate candidate_through(std::uint64_t at,
                                    const std::unordered_map<std::uint64_t, const FiberSnapshot*>& waiting) {
  DeadlockCandidate candidate;
  std::uint64_t member = at;
  do {
    const FiberSnapshot& fiber = *waiting.at(member);
    candidate.cycle.fibers.push_back(member);
    candidate.seen.emplace(member, FiberWait{fiber.counts.park, fiber.wait_object, fiber.held_by_fiber});
    member = fiber.held_by_fiber;
  } while (member != at);
  // From its lowest id, keeping the order of the waits.
  auto& fibers = candidate.cycle.fibers;
  std::rotate(fibers.begin(), std::min_element(fibers.begin(), fibers.end()), fibers.end());
  return candidate;
}

bool two_members_wait_on_one_object(const DeadlockCandidate& candidate) {
  std::vector<const void*> objects;
  for (const auto& [member, wait] : candidate.seen) objects.push_back(wait.object);
  std::sort(objects.begin(), objects.end());
  return std::adjacent_find(objects.begin(), objects.end()) != objects.end();
}

}  // namespace

std::vector<DeadlockCandidate> find_deadlocks(const ProcessSnapshot& process) {
  // Each fiber's edge: the fiber it waits for, if it is parked on something
  // a live fiber holds.
  const auto waiting = waiting_fibers(process);
  // 0: not visited; otherwise the number of the walk that first reached it.
  std::unordered_map<std::uint64_t, unsigned> walk_of;
  std::vector<std::uint64_t> starts;
  starts.reserve(waiting.size());
  for (const auto& [id, fiber] : waiting) starts.push_back(id);
  std::sort(starts.begin(), starts.end());
  std::vector<DeadlockCandidate> candidates;
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
          DeadlockCandidate candidate = candidate_through(at, waiting);
          if (!two_members_wait_on_one_object(candidate)) candidates.push_back(std::move(candidate));
        }
        break;
      }
      walk_of.emplace(at, walk);
      const auto next = waiting.find(at);
      if (next == waiting.end()) break;
      at = next->second->held_by_fiber;
    }
  }
  std::sort(candidates.begin(), candidates.end(), [](const DeadlockCandidate& a, const DeadlockCandidate& b) {
    return a.cycle.fibers.front() < b.cycle.fibers.front();
  });
  return candidates;
}

bool waits_as_seen(const DeadlockCandidate& candidate, const FiberWaits& now) {
  const auto still_in_its_park = [&](const auto& member_wait) {
    const auto read = now.find(member_wait.first);
    return read != now.end() && read->second.parks == member_wait.second.parks;
  };
  // Some member still in the same park: in a real deadlock one at least
  // waits without end; where every member parked again (fibers that time
  // out, let go of what they hold and try again), the cycle came apart and
  // formed anew between the two reads, and they make progress.
  if (!std::any_of(candidate.seen.begin(), candidate.seen.end(), still_in_its_park)) return false;
  return std::all_of(candidate.seen.begin(), candidate.seen.end(), [&](const auto& member_wait) {
    const auto& [member, then] = member_wait;
    const auto read = now.find(member);
    if (read == now.end() || read->second.object != then.object || read->second.holder != then.holder) return false;
    // Waiting for what it holds itself: a real one stays in its park; a
    // lock handed to it again and again looks so for a moment each time.
    return then.holder != member || still_in_its_park(member_wait);
  });
}

bool waits_for_itself(const DeadlockCandidate& candidate) {
  return std::any_of(candidate.seen.begin(), candidate.seen.end(),
                     [](const auto& member_wait) { return member_wait.second.holder == member_wait.first; });
}

}  // namespace weft::detail
