// BlockCache: a per-thread free list of equal-sized blocks, for the one
// object every spawn allocates and every finished fiber frees, its
// FiberControl. glibc's own per-thread cache holds only 7 blocks of a size,
// so a batch of spawns and joins went through malloc's slow paths: about
// 150 of the 1,430 instructions of a spawn+join (callgrind).
//
// Blocks move between threads with their objects (a fiber spawned on one
// worker may be freed on another, or by a plain thread's join); each thread
// keeps at most kCapacity, a shared list some more, and the rest goes back
// to the chunks the blocks are carved from (runtime/block_chunks.h). Under
// AddressSanitizer it is plain new and delete, so that a use after free is
// still caught.
#pragma once

#include <cstddef>

namespace weft::detail {

class BlockCache {
 public:
  static constexpr std::size_t kCapacity = 256;

  static void* allocate(std::size_t size);
  static void free(void* block, std::size_t size) noexcept;
};

}  // namespace weft::detail
