#include "block_chunks.h"

#include <sys/mman.h>

#include <mutex>
#include <new>
#include <stdexcept>
#include <string>

namespace weft::detail {

BlockChunks::BlockChunks(std::size_t block_size)
    : block_size_(block_size), capacity_(static_cast<std::uint32_t>(kChunkBytes / block_size - 1)) {
  static_assert(sizeof(Chunk) <= 64, "a chunk's header fits in its first block");
  if (!fits(block_size))
    throw std::invalid_argument("weft: BlockChunks: block size " + std::to_string(block_size) +
                                " is not a multiple of 16 between 64 and " + std::to_string(kChunkBytes / 8));
}

BlockChunks::~BlockChunks() {
  while (Chunk* chunk = partial_) {
    unlink(chunk);
    unmap_chunk(chunk);
  }
  if (spare_ != nullptr) unmap_chunk(spare_);
}

void BlockChunks::allocate(void** out, std::size_t n) {
  std::size_t taken = 0;
  {
    std::lock_guard guard(lock_);
    for (; taken < n; ++taken) {
      Chunk* chunk = chunk_with_room();
      if (chunk == nullptr) break;
      void* block;
      if (FreeBlock* free = chunk->free) {
        chunk->free = free->next;
        block = free;
      } else {
        ++chunk->carved;  // the header's is block 0
        block = reinterpret_cast<char*>(chunk) + std::size_t{chunk->carved} * block_size_;
      }
      ++chunk->in_use;
      if (!has_room(*chunk)) unlink(chunk);
      out[taken] = block;
    }
  }
  if (taken < n) {
    free(out, taken);
    throw std::bad_alloc();
  }
}

void BlockChunks::free(void* const* blocks, std::size_t n) noexcept {
  // Unmapped after the lock is released: a batch empties few chunks.
  for (std::size_t start = 0; start < n; start += kFreeBatch) {
    Chunk* emptied[kFreeBatch];
    std::size_t count = 0;
    {
      std::lock_guard guard(lock_);
      for (std::size_t i = start; i < n && i < start + kFreeBatch; ++i)
        if (Chunk* chunk = give_back(blocks[i])) emptied[count++] = chunk;
    }
    for (std::size_t i = 0; i < count; ++i) unmap_chunk(emptied[i]);
  }
}

BlockChunks::Chunk* BlockChunks::give_back(void* block) noexcept {
  Chunk* chunk = chunk_of(block);
  if (!has_room(*chunk)) link(chunk);
  chunk->free = ::new (block) FreeBlock{chunk->free};
  if (--chunk->in_use != 0) return nullptr;
  unlink(chunk);
  if (spare_ != nullptr) return chunk;
  // Kept, as if fresh: its blocks are carved again, in address order.
  chunk->free = nullptr;
  chunk->carved = 0;
  spare_ = chunk;
  return nullptr;
}

BlockChunks::Chunk* BlockChunks::chunk_with_room() noexcept {
  if (partial_ != nullptr) return partial_;
  Chunk* chunk = spare_;
  spare_ = nullptr;
  if (chunk == nullptr) {
    chunk = map_chunk();
    if (chunk == nullptr) return nullptr;
  }
  link(chunk);
  return chunk;
}

void BlockChunks::link(Chunk* chunk) noexcept {
  chunk->prev = nullptr;
  chunk->next = partial_;
  if (partial_ != nullptr) partial_->prev = chunk;
  partial_ = chunk;
}

void BlockChunks::unlink(Chunk* chunk) noexcept {
  if (chunk->prev != nullptr)
    chunk->prev->next = chunk->next;
  else
    partial_ = chunk->next;
  if (chunk->next != nullptr) chunk->next->prev = chunk->prev;
  chunk->prev = chunk->next = nullptr;
}

BlockChunks::Chunk* BlockChunks::map_chunk() noexcept {
  // Twice the size, then the unaligned ends given back: a chunk aligned to
  // its size.
  void* mapping = ::mmap(nullptr, 2 * kChunkBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(mapping);
  const std::uintptr_t aligned = (start + kChunkBytes - 1) & ~(kChunkBytes - 1);
  if (aligned != start) ::munmap(mapping, aligned - start);
  const std::uintptr_t tail = start + 2 * kChunkBytes - (aligned + kChunkBytes);
  if (tail != 0) ::munmap(reinterpret_cast<void*>(aligned + kChunkBytes), tail);
  mapped_.fetch_add(1, std::memory_order_relaxed);
  return ::new (reinterpret_cast<void*>(aligned)) Chunk{};
}

void BlockChunks::unmap_chunk(Chunk* chunk) noexcept {
  ::munmap(chunk, kChunkBytes);
  mapped_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace weft::detail
