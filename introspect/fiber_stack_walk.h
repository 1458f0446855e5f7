// Walking a parked fiber's stack from another thread, for weft-dump.
//
// park() records two words on the fiber (FiberControl::park_frame and
// park_call_site): its own frame pointer and its return address. That is all
// the hot path pays. The dump thread then follows the frame-pointer chain
// from that frame upwards: each frame starts with the caller's saved frame
// pointer and the return address into the caller. weft is built with
// -fno-omit-frame-pointer, so its own frames chain; code built without it
// breaks the chain, and then the call site alone is reported.
//
// The stack belongs to a fiber that may wake up at any instant, so it is
// read with process_vm_readv() on our own pid: an unmapped or changing page
// gives an error or stale bytes, never a fault, and ThreadSanitizer does not
// see a read it would (rightly) call a race. Stale bytes are what the
// bounds and the consistency check below are for:
//   - each next frame must be 8-aligned, strictly above the previous one
//     and inside the fiber's stack; at most kMaxStackFrames are taken;
//   - the fiber's switch-in count (counters.active) is read before and
//     after the walk, and its state must be parked before and after. Any
//     run of the fiber starts with that count's increment, which
//     Worker::switch_in stores before the fiber touches its stack; so if a
//     byte we read was written by a resumed fiber, the second read sees the
//     new count (x86-64's ordered stores and loads; the syscall orders ours),
//     and the walked frames are dropped. The park counter cannot serve: it
//     is bumped after the state turns parked, so a re-park can show the old
//     count with the new state.
// On a weakly ordered CPU a torn walk could slip through that check. It
// would show wrong frames, never crash: every read goes through the kernel.
//
// Batches: one process_vm_readv costs ~2.5 us here (the system call and
// pinning the page), 0.25 s for 100,000 fibers, against 0.1 s for the rest
// of their dump. So the first window of up to kBatchSize fibers' stacks is
// read by one call with one iovec per fiber (64 ms per 100,000 here); a
// chain that leaves its window, or a window the batch could not read,
// costs a call of its own.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "../runtime/fiber_control.h"

namespace weft::detail {

constexpr std::size_t kMaxStackFrames = 32;

// Walks the stacks of parked fibers, a batch at a time:
//
//   ParkedStackWalker walker(getpid());
//   registry.for_each([&](const FiberControl& f) { ... walker.add(f, out); if (walker.full()) walker.walk(); },
//                     [&] { walker.walk(); });  // before the fibers can go
class ParkedStackWalker {
 public:
  static constexpr std::size_t kBatchSize = 256;
  static constexpr std::size_t kWindowBytes = 512;

  explicit ParkedStackWalker(pid_t pid);
  ParkedStackWalker(const ParkedStackWalker&) = delete;
  ParkedStackWalker& operator=(const ParkedStackWalker&) = delete;

  // Queues `fiber`: at walk(), `out` receives the return addresses of its
  // frames, innermost first (the first is park()'s call site), or stays
  // empty if it is not parked or moved while being read. Both must stay
  // valid until then (`fiber`: under its registry shard's lock).
  void add(const FiberControl& fiber, std::vector<std::uintptr_t>& out);
  bool full() const noexcept { return count_ == kBatchSize; }
  // Walks the queued fibers and empties the batch.
  void walk();

 private:
  struct Entry {
    const FiberControl* fiber;
    std::vector<std::uintptr_t>* out;
    std::uint64_t active;  // the switch-in count before the walk
    std::uintptr_t call_site, frame, low, high;
    std::size_t window_bytes;  // read from `frame` by the batch; 0: none
    bool window_read;
  };
  void read_windows();
  void walk_one(Entry& entry, const std::uintptr_t* window);

  const pid_t pid_;
  std::size_t count_ = 0;
  Entry entries_[kBatchSize];
  std::unique_ptr<std::uintptr_t[]> windows_;  // kBatchSize windows of kWindowBytes
};

}  // namespace weft::detail
