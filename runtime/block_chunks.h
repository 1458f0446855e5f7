// BlockChunks: blocks of one size carved from mappings of their own, the
// memory behind BlockCache's lists.
//
// From glibc, a worker thread's blocks came from its thread arena, which
// glibc grows a page at a time, each growth an mprotect(2): a million
// spawns made 130,490 of those calls, about a third of the spawns' time
// (docs/benchmarks.md, "Lazy stacks and the idle pair").
//
// A chunk is kChunkBytes, aligned to its size, so a block's chunk is its
// address rounded down; its first block's room holds the chunk's header.
// Invariants, under the lock:
//   - a chunk is in the `partial` list iff it has a free or uncarved block;
//   - in_use counts its blocks handed out and not given back (BlockCache's
//     lists hold blocks that are handed out);
//   - a chunk whose in_use drops to 0 is unmapped, except one, kept as
//     `spare_` for the next burst so that a steady spawn-and-join rate near
//     a chunk's worth does not map and unmap each time.
// One lock for all, taken once per batch (BlockCache moves blocks in
// batches of up to half its capacity); a new chunk is mapped under it,
// once per chunk's worth of blocks, and an emptied one unmapped after it.
#pragma once

#include <weft/detail/spin_lock.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace weft::detail {

class BlockChunks {
 public:
  static constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
  // free() takes the lock once per this many blocks.
  static constexpr std::size_t kFreeBatch = 32;

  // `block_size`: one that fits() (checked: std::invalid_argument).
  explicit BlockChunks(std::size_t block_size);
  BlockChunks(const BlockChunks&) = delete;
  BlockChunks& operator=(const BlockChunks&) = delete;
  // Unmaps every chunk: only when no block of it is in use any more.
  ~BlockChunks();

  // Whether blocks of `size` can be made.
  static bool fits(std::size_t size) noexcept { return size % 16 == 0 && size >= 64 && size <= kChunkBytes / 8; }
  std::size_t block_size() const noexcept { return block_size_; }
  // Fills out[0..n) with blocks; throws std::bad_alloc when a chunk cannot
  // be mapped (the blocks taken before are given back first).
  void allocate(void** out, std::size_t n);
  // Gives back blocks that allocate() handed out.
  void free(void* const* blocks, std::size_t n) noexcept;
  // Chunks mapped now, the spare included.
  std::size_t mapped_chunks() const noexcept { return mapped_.load(std::memory_order_relaxed); }

  // fork(): the owner holds the lock across it, so that the child's copy
  // is consistent and its lock free (pthread_atfork).
  void lock_for_fork() noexcept { lock_.lock(); }
  void unlock_after_fork() noexcept { lock_.unlock(); }

 private:
  struct FreeBlock {
    FreeBlock* next;
  };
  struct Chunk {
    Chunk* prev = nullptr;  // in partial_
    Chunk* next = nullptr;
    FreeBlock* free = nullptr;
    std::uint32_t in_use = 0;
    std::uint32_t carved = 0;  // blocks carved so far, after the header's
  };

  Chunk* chunk_of(void* block) const noexcept {
    return reinterpret_cast<Chunk*>(reinterpret_cast<std::uintptr_t>(block) & ~(kChunkBytes - 1));
  }
  bool has_room(const Chunk& chunk) const noexcept { return chunk.free != nullptr || chunk.carved < capacity_; }
  void link(Chunk* chunk) noexcept;
  void unlink(Chunk* chunk) noexcept;
  // Under the lock: a chunk with room, mapping one if need be; null if mmap
  // failed.
  Chunk* chunk_with_room() noexcept;
  // Returns the chunk to unmap after the lock is released, or null.
  Chunk* give_back(void* block) noexcept;
  Chunk* map_chunk() noexcept;
  void unmap_chunk(Chunk* chunk) noexcept;

  const std::size_t block_size_;
  const std::uint32_t capacity_;  // blocks a chunk holds after its header's
  SpinLock lock_;
  Chunk* partial_ = nullptr;  // guarded by lock_
  Chunk* spare_ = nullptr;    // guarded by lock_: empty, not in partial_
  std::atomic<std::size_t> mapped_{0};
};

}  // namespace weft::detail
