#include "block_cache.h"

#include <pthread.h>
#include <weft/detail/spin_lock.h>

#include <atomic>
#include <mutex>
#include <new>

#include "block_chunks.h"

#if defined(__SANITIZE_ADDRESS__)
#define WEFT_BLOCK_CACHE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_BLOCK_CACHE 0
#endif
#endif
#ifndef WEFT_BLOCK_CACHE
#define WEFT_BLOCK_CACHE 1
#endif

namespace weft::detail {
namespace {

struct FreeBlock {
  FreeBlock* next;
};

// A list of free blocks, all of the chunks' size.
struct BlockList {
  FreeBlock* head = nullptr;
  std::size_t count = 0;

  void push(void* block) noexcept {
    head = ::new (block) FreeBlock{head};
    ++count;
  }
  void* pop() noexcept {
    FreeBlock* block = head;
    head = block->next;
    --count;
    return block;
  }
  // Moves up to `n` blocks from here to `to`.
  void move_to(BlockList& to, std::size_t n) noexcept {
    while (n-- > 0 && head != nullptr) to.push(pop());
  }
  // Gives up to `n` blocks back to `chunks`, in batches of BlockChunks::free's
  // own size (one lock each): a bigger array would only take more of the
  // stack of the fiber that frees, and take the lock no less often.
  void give_back(BlockChunks& chunks, std::size_t n) noexcept {
    void* batch[BlockChunks::kFreeBatch];
    while (n > 0 && head != nullptr) {
      std::size_t count = 0;
      while (count < std::size(batch) && n > 0 && head != nullptr) {
        batch[count++] = pop();
        --n;
      }
      chunks.free(batch, count);
    }
  }
};

// The memory behind the lists: chunks of the first size asked for
// (FiberControl's; runtime/block_chunks.h). Never destroyed: threads give
// their blocks back as they exit, after static destructors may have run.
std::atomic<BlockChunks*> chunks_made{nullptr};

// Where a block of `size` that BlockCache handed out came from: the chunks,
// or operator new.
BlockChunks* chunks_holding(std::size_t size) noexcept {
  BlockChunks* chunks = chunks_made.load(std::memory_order_acquire);
  return chunks != nullptr && chunks->block_size() == size ? chunks : nullptr;
}

// The same for a block about to be allocated: the first call makes the
// chunks, for its size if they can carve it.
BlockChunks* chunks_for(std::size_t size) {
  if (chunks_made.load(std::memory_order_acquire) == nullptr) [[unlikely]] {
    static const bool made = [size] {
      if (BlockChunks::fits(size)) chunks_made.store(new BlockChunks(size), std::memory_order_release);
      return true;
    }();
    (void)made;
  }
  return chunks_holding(size);
}

// Blocks freed by one thread are often allocated by another (a worker
// spawns, another finishes the fiber): full caches hand half of their
// blocks to this shared list, and empty ones refill from it, a batch per
// lock. Without it, the spawner allocated from malloc every time while the
// other thread's frees went back to malloc, which trimmed and regrew its
// heap: page faults on every batch.
constexpr std::size_t kSharedCapacity = 16 * BlockCache::kCapacity;
SpinLock shared_lock;
BlockList shared;                           // guarded by shared_lock
std::atomic<std::size_t> shared_available;  // shared.count, to look without the lock

// fork(): held across it, so that the child's copy of the shared list is
// consistent and its lock free (the child's fibers allocate blocks too).
// The chunks' lock likewise, taken after it (the only order they are held
// in; elsewhere never both at once).
void lock_for_fork() noexcept {
  shared_lock.lock();
  if (BlockChunks* chunks = chunks_made.load(std::memory_order_acquire)) chunks->lock_for_fork();
}
void unlock_after_fork() noexcept {
  if (BlockChunks* chunks = chunks_made.load(std::memory_order_acquire)) chunks->unlock_after_fork();
  shared_lock.unlock();
}
[[gnu::constructor]] void register_fork_handlers() {
  pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
}

struct ThreadBlocks {
  BlockList list;
  ~ThreadBlocks() {
    {
      std::lock_guard guard(shared_lock);
      if (shared.count < kSharedCapacity) list.move_to(shared, kSharedCapacity - shared.count);
      shared_available.store(shared.count, std::memory_order_relaxed);
    }
    // Not empty: blocks were allocated, so the chunks were made.
    if (list.head != nullptr) list.give_back(*chunks_made.load(std::memory_order_acquire), list.count);
  }
};

[[gnu::tls_model("initial-exec")]] thread_local ThreadBlocks blocks;

}  // namespace

void* BlockCache::allocate(std::size_t size) {
  BlockChunks* chunks = WEFT_BLOCK_CACHE ? chunks_for(size) : nullptr;
  if (chunks == nullptr) return ::operator new(size);
  // Every list holds blocks of the chunks' size only (free() below).
  BlockList& mine = blocks.list;
  if (mine.head == nullptr && shared_available.load(std::memory_order_relaxed) != 0) {
    std::lock_guard guard(shared_lock);
    shared.move_to(mine, kCapacity / 2);
    shared_available.store(shared.count, std::memory_order_relaxed);
  }
  if (mine.head == nullptr) {
    void* batch[kCapacity / 2];
    chunks->allocate(batch, std::size(batch));
    for (void* block : batch) mine.push(block);
  }
  return mine.pop();
}

void BlockCache::free(void* block, std::size_t size) noexcept {
  BlockChunks* chunks = WEFT_BLOCK_CACHE ? chunks_holding(size) : nullptr;
  if (chunks == nullptr) {
    ::operator delete(block);
    return;
  }
  BlockList& mine = blocks.list;
  if (mine.count == kCapacity) {
    // Half to the shared list if it has room, else back to the chunks.
    bool moved = false;
    {
      std::lock_guard guard(shared_lock);
      if (shared.count < kSharedCapacity) {
        mine.move_to(shared, kCapacity / 2);
        moved = true;
      }
      shared_available.store(shared.count, std::memory_order_relaxed);
    }
    if (!moved) mine.give_back(*chunks, kCapacity / 2);
  }
  mine.push(block);
}

}  // namespace weft::detail
