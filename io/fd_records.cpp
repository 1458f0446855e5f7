#include "fd_records.h"

#include <sys/mman.h>

#include <new>

namespace weft::detail {
namespace {

constexpr std::size_t kChunkSize = std::size_t{1} << FdRecords::kChunkBits;

FdRecord* allocate_chunk() noexcept {
  void* memory =
      mmap(nullptr, sizeof(FdRecord) * kChunkSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return nullptr;
  auto* records = static_cast<FdRecord*>(memory);
  for (std::size_t i = 0; i < kChunkSize; ++i) new (&records[i]) FdRecord;
  return records;
}

// Constant-initialized (the libc hooks may close fds before any constructor
// runs) and trivially destructible (pollers may look records up during
// exit); the chunks are never freed.
constinit FdRecords records;

}  // namespace

FdRecord* FdRecords::get(int fd) noexcept {
  if (fd < 0 || fd >= kLimit) return nullptr;
  const auto index = static_cast<unsigned>(fd);
  std::atomic<FdRecord*>& slot = chunks_[index >> kChunkBits];
  FdRecord* chunk = slot.load(std::memory_order_acquire);
  if (chunk == nullptr) {
    FdRecord* fresh = allocate_chunk();
    if (fresh == nullptr) return nullptr;
    // acq_rel: the winner publishes constructed records; a loser sees them.
    if (slot.compare_exchange_strong(chunk, fresh, std::memory_order_acq_rel, std::memory_order_acquire))
      chunk = fresh;
    else
      munmap(fresh, sizeof(FdRecord) * kChunkSize);  // another thread won; `chunk` is its chunk
  }
  return &chunk[index & (kChunkSize - 1)];
}

FdRecord* FdRecords::find(int fd) const noexcept {
  if (fd < 0 || fd >= kLimit) return nullptr;
  const auto index = static_cast<unsigned>(fd);
  FdRecord* chunk = chunks_[index >> kChunkBits].load(std::memory_order_acquire);
  return chunk != nullptr ? &chunk[index & (kChunkSize - 1)] : nullptr;
}

FdRecords& fd_records() noexcept { return records; }

}  // namespace weft::detail
