#include "cache_trust.h"

#include <atomic>
#include <cstddef>

#include "../io/fd_records.h"

namespace weft::detail {
namespace {

constexpr std::size_t kSlots = 1024;  // a power of two
// A slot: the key in the high half, and in the low half the file's reads
// served whole in a row (up to kTrustCache); 0 when empty.
constinit std::atomic<std::uint64_t> slots[kSlots] = {};

// A 64-bit mix (splitmix64's finaliser), so that keys that differ in a few
// low bits (inodes made one after another) land in different slots.
constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::atomic<std::uint64_t>& slot_of(std::uint32_t key) noexcept { return slots[key & (kSlots - 1)]; }
std::uint64_t slot_value(std::uint32_t key, std::uint64_t count) noexcept { return std::uint64_t(key) << 32 | count; }
bool holds(std::uint64_t slot, std::uint32_t key) noexcept { return slot >> 32 == key; }

}  // namespace

std::uint32_t cache_trust_key(const struct stat& st) noexcept {
  std::uint64_t key = mix(std::uint64_t(st.st_dev));
  key = mix(key ^ std::uint64_t(st.st_ino));
  key = mix(key ^ std::uint64_t(st.st_ctim.tv_sec));
  key = mix(key ^ std::uint64_t(st.st_ctim.tv_nsec));
  const auto folded = static_cast<std::uint32_t>(key ^ (key >> 32));
  return folded == 0 ? 1 : folded;
}

bool cache_trusted(std::uint32_t key) noexcept {
  if (key == 0) return false;
  const std::uint64_t slot = slot_of(key).load(std::memory_order_relaxed);
  return holds(slot, key) && (slot & 0xffffffff) >= FdRecord::kTrustCache;
}

void cache_served(std::uint32_t key) noexcept {
  if (key == 0) return;
  std::atomic<std::uint64_t>& slot = slot_of(key);
  const std::uint64_t now = slot.load(std::memory_order_relaxed);
  const std::uint64_t count = holds(now, key) ? now & 0xffffffff : 0;
  if (count >= FdRecord::kTrustCache) return;  // trusted already: no write to a line others read
  slot.store(slot_value(key, count + 1), std::memory_order_relaxed);
}

void distrust_cache(std::uint32_t key) noexcept {
  if (key == 0) return;
  std::atomic<std::uint64_t>& slot = slot_of(key);
  std::uint64_t now = slot.load(std::memory_order_relaxed);
  if (holds(now, key)) slot.compare_exchange_strong(now, 0, std::memory_order_relaxed);
}

}  // namespace weft::detail
