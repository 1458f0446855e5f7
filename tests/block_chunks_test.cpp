// BlockChunks (runtime/block_chunks.h): blocks carved from aligned
// mappings, given back across threads, and chunks unmapped once emptied.
#include "runtime/block_chunks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace weft::detail {
namespace {

constexpr std::size_t kBlock = 512;
constexpr std::size_t kPerChunk = BlockChunks::kChunkBytes / kBlock - 1;  // the header takes one

std::vector<void*> take(BlockChunks& chunks, std::size_t n) {
  std::vector<void*> blocks(n);
  for (std::size_t done = 0; done < n; done += 128)
    chunks.allocate(blocks.data() + done, std::min<std::size_t>(128, n - done));
  return blocks;
}

TEST(BlockChunks, CarvesDistinctAlignedBlocksAndUnmapsWhatEmpties) {
  BlockChunks chunks(kBlock);
  EXPECT_EQ(chunks.mapped_chunks(), 0u);
  const std::size_t n = 2 * kPerChunk + 100;  // three chunks
  std::vector<void*> blocks = take(chunks, n);
  EXPECT_EQ(chunks.mapped_chunks(), 3u);
  std::set<std::uintptr_t> seen;
  for (void* block : blocks) {
    const auto address = reinterpret_cast<std::uintptr_t>(block);
    EXPECT_EQ(address % 16, 0u);
    EXPECT_TRUE(seen.insert(address).second) << "a block handed out twice";
    std::memset(block, 0xab, kBlock);  // writable, and overlapping nothing (the set and the sizes)
  }
  for (auto it = seen.begin(); std::next(it) != seen.end(); ++it) ASSERT_GE(*std::next(it) - *it, kBlock);
  chunks.free(blocks.data(), blocks.size());
  EXPECT_EQ(chunks.mapped_chunks(), 1u) << "every emptied chunk but one spare is unmapped";
  // The spare serves the next burst without a new mapping.
  std::vector<void*> again = take(chunks, 100);
  EXPECT_EQ(chunks.mapped_chunks(), 1u);
  chunks.free(again.data(), again.size());
}

TEST(BlockChunks, AChunkWithABlockInUseStaysMapped) {
  BlockChunks chunks(kBlock);
  std::vector<void*> blocks = take(chunks, 2 * kPerChunk);
  ASSERT_EQ(chunks.mapped_chunks(), 2u);
  // Keep one block of each chunk; give back the rest.
  std::vector<void*> kept{blocks.front(), blocks.back()};
  blocks.erase(blocks.begin());
  blocks.pop_back();
  chunks.free(blocks.data(), blocks.size());
  EXPECT_EQ(chunks.mapped_chunks(), 2u);
  std::memset(kept[0], 1, kBlock);  // still mapped and writable
  std::memset(kept[1], 1, kBlock);
  // Freed room is reused before anything new is mapped.
  std::vector<void*> reused = take(chunks, 2 * kPerChunk - 2);
  EXPECT_EQ(chunks.mapped_chunks(), 2u);
  chunks.free(reused.data(), reused.size());
  chunks.free(kept.data(), kept.size());
  EXPECT_EQ(chunks.mapped_chunks(), 1u);
}

TEST(BlockChunks, BlocksGivenBackByOtherThreads) {
  // Fibers are spawned on one thread and freed on another: producers
  // allocate, consumers give back, all at once.
  BlockChunks chunks(kBlock);
  std::mutex lock;
  std::vector<void*> handed;
  constexpr int kProducers = 2, kConsumers = 2, kBatches = 200;
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&] {
      for (int b = 0; b < kBatches; ++b) {
        void* batch[64];
        chunks.allocate(batch, 64);
        for (void* block : batch) std::memset(block, b, kBlock);
        std::lock_guard guard(lock);
        handed.insert(handed.end(), std::begin(batch), std::end(batch));
      }
    });
  }
  std::atomic<int> producers_left{kProducers};
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&] {
      for (;;) {
        std::vector<void*> mine;
        {
          std::lock_guard guard(lock);
          mine.swap(handed);
        }
        if (!mine.empty())
          chunks.free(mine.data(), mine.size());
        else if (producers_left.load() == 0)
          return;
        else
          std::this_thread::yield();
      }
    });
  }
  for (int p = 0; p < kProducers; ++p) {
    threads[p].join();
    producers_left.fetch_sub(1);
  }
  for (int c = 0; c < kConsumers; ++c) threads[kProducers + c].join();
  std::lock_guard guard(lock);
  chunks.free(handed.data(), handed.size());
  EXPECT_LE(chunks.mapped_chunks(), 1u);
}

TEST(BlockChunks, RejectsASizeItCannotCarve) {
  EXPECT_THROW(BlockChunks{100}, std::invalid_argument);  // not a multiple of 16
  EXPECT_THROW(BlockChunks{16}, std::invalid_argument);   // no room for a chunk's header
  EXPECT_THROW(BlockChunks{BlockChunks::kChunkBytes}, std::invalid_argument);
  EXPECT_NO_THROW(BlockChunks{kBlock});
}

}  // namespace
}  // namespace weft::detail
