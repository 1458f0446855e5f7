#include "block_cache.h"

#include <pthread.h>
#include <weft/detail/spin_lock.h>

#include <atomic>
#include <mutex>
#include <new>

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

// A list of free blocks of one size.
struct BlockList {
  FreeBlock* head = nullptr;
  std::size_t count = 0;
  std::size_t size = 0;  // of every block in it; 0 while empty and unused

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
  void free_all() noexcept {
    while (head != nullptr) ::operator delete(pop());
  }
};

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
[[gnu::constructor]] void register_fork_handlers() {
  pthread_atfork([] { shared_lock.lock(); }, [] { shared_lock.unlock(); }, [] { shared_lock.unlock(); });
}

struct ThreadBlocks {
  BlockList list;
  ~ThreadBlocks() {
    std::lock_guard guard(shared_lock);
    if (shared.size == list.size && shared.count < kSharedCapacity)
      list.move_to(shared, kSharedCapacity - shared.count);
    shared_available.store(shared.count, std::memory_order_relaxed);
    list.free_all();
  }
};

[[gnu::tls_model("initial-exec")]] thread_local ThreadBlocks blocks;

}  // namespace

void* BlockCache::allocate(std::size_t size) {
  if (WEFT_BLOCK_CACHE) {
    BlockList& mine = blocks.list;
    if (mine.head == nullptr && shared_available.load(std::memory_order_relaxed) != 0) {
      std::lock_guard guard(shared_lock);
      if (shared.size == size) {  // `mine` is empty: it takes any size
        mine.size = size;
        shared.move_to(mine, kCapacity / 2);
        shared_available.store(shared.count, std::memory_order_relaxed);
      }
    }
    if (mine.head != nullptr && mine.size == size) return mine.pop();
  }
  return ::operator new(size);
}

void BlockCache::free(void* block, std::size_t size) noexcept {
  if (WEFT_BLOCK_CACHE && size >= sizeof(FreeBlock)) {
    BlockList& mine = blocks.list;
    if (mine.count == 0) mine.size = size;
    if (mine.size == size) {
      if (mine.count == kCapacity) {
        std::lock_guard guard(shared_lock);
        if (shared.count == 0) shared.size = size;
        if (shared.size == size && shared.count < kSharedCapacity) mine.move_to(shared, kCapacity / 2);
        shared_available.store(shared.count, std::memory_order_relaxed);
      }
      if (mine.count < kCapacity) {
        mine.push(block);
        return;
      }
    }
  }
  ::operator delete(block);
}

}  // namespace weft::detail
