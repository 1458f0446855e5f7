#include "block_cache.h"

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

// One size per thread: the first one cached. Other sizes bypass the cache.
struct ThreadBlocks {
  FreeBlock* head = nullptr;
  std::size_t count = 0;
  std::size_t size = 0;

  ~ThreadBlocks() {
    while (head != nullptr) {
      FreeBlock* block = head;
      head = block->next;
      ::operator delete(block, size);
    }
  }
};

[[gnu::tls_model("initial-exec")]] thread_local ThreadBlocks blocks;

}  // namespace

void* BlockCache::allocate(std::size_t size) {
  if (WEFT_BLOCK_CACHE && blocks.head != nullptr && blocks.size == size) {
    FreeBlock* block = blocks.head;
    blocks.head = block->next;
    --blocks.count;
    return block;
  }
  return ::operator new(size);
}

void BlockCache::free(void* block, std::size_t size) noexcept {
  if (WEFT_BLOCK_CACHE && size >= sizeof(FreeBlock) && blocks.count < kCapacity &&
      (blocks.size == size || blocks.count == 0)) {
    blocks.size = size;
    blocks.head = ::new (block) FreeBlock{blocks.head};
    ++blocks.count;
    return;
  }
  ::operator delete(block, size);
}

}  // namespace weft::detail
