#include "fd_records.h"

namespace weft::detail {

FdRecord& FdRecords::get(int fd) {
  const auto index = static_cast<unsigned>(fd);
  std::atomic<FdRecord*>& slot = chunks_[index >> kChunkBits];
  FdRecord* chunk = slot.load(std::memory_order_acquire);
  if (chunk == nullptr) {
    auto* fresh = new FdRecord[std::size_t{1} << kChunkBits];
    if (slot.compare_exchange_strong(chunk, fresh, std::memory_order_acq_rel, std::memory_order_acquire))
      chunk = fresh;
    else
      delete[] fresh;  // another thread won; `chunk` is its chunk
  }
  return chunk[index & ((1u << kChunkBits) - 1)];
}

FdRecord* FdRecords::find(int fd) const noexcept {
  if (fd < 0 || fd >= kLimit) return nullptr;
  const auto index = static_cast<unsigned>(fd);
  FdRecord* chunk = chunks_[index >> kChunkBits].load(std::memory_order_acquire);
  return chunk != nullptr ? &chunk[index & ((1u << kChunkBits) - 1)] : nullptr;
}

namespace {
// Constant-initialized (the libc hooks may close fds before any constructor
// runs) and trivially destructible (pollers may look records up during
// exit); the chunks are never freed.
constinit FdRecords records;
}  // namespace

FdRecords& fd_records() noexcept { return records; }

}  // namespace weft::detail
