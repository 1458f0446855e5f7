#include "fiber_stack_walk.h"

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <climits>

namespace weft::detail {
namespace {

constexpr std::size_t kWord = sizeof(std::uintptr_t);

bool read_memory(pid_t pid, std::uintptr_t from, void* to, std::size_t size) {
  iovec local{to, size};
  iovec remote{reinterpret_cast<void*>(from), size};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(size);
}

// The two words of a frame, saved frame pointer and return address, from
// the batch's window when it holds them, else by a read of their own.
class FrameReader {
 public:
  FrameReader(pid_t pid, std::uintptr_t low, std::uintptr_t high, std::uintptr_t window_begin,
              const std::uintptr_t* window, std::size_t window_bytes)
      : pid_(pid), low_(low), high_(high), begin_(window_begin), window_(window), bytes_(window_bytes) {}

  // False if `frame` is misaligned, outside the stack, or unreadable.
  bool read(std::uintptr_t frame, std::uintptr_t& saved_frame, std::uintptr_t& return_address) const {
    if (frame % kWord != 0 || frame < low_ || high_ < 2 * kWord || frame > high_ - 2 * kWord) return false;
    if (window_ != nullptr && frame >= begin_ && frame + 2 * kWord <= begin_ + bytes_) {
      saved_frame = window_[(frame - begin_) / kWord];
      return_address = window_[(frame - begin_) / kWord + 1];
      return true;
    }
    std::uintptr_t words[2];
    if (!read_memory(pid_, frame, words, sizeof(words))) return false;
    saved_frame = words[0];
    return_address = words[1];
    return true;
  }

 private:
  const pid_t pid_;
  const std::uintptr_t low_, high_, begin_;
  const std::uintptr_t* const window_;
  const std::size_t bytes_;
};

}  // namespace

static_assert(ParkedStackWalker::kBatchSize <= IOV_MAX);
static_assert(ParkedStackWalker::kWindowBytes % kWord == 0);

ParkedStackWalker::ParkedStackWalker(pid_t pid)
    : pid_(pid), windows_(std::make_unique<std::uintptr_t[]>(kBatchSize * kWindowBytes / kWord)) {}

void ParkedStackWalker::add(const FiberControl& fiber, std::vector<std::uintptr_t>& out) {
  Entry& e = entries_[count_++];
  e.fiber = &fiber;
  e.out = &out;
  e.window_bytes = 0;
  e.window_read = false;
  // The count first: see the consistency argument in the header.
  e.active = fiber.counters.active.load(std::memory_order_acquire);
  if (fiber.state.load(std::memory_order_acquire) != FiberState::parked) {
    e.call_site = 0;
    return;
  }
  e.call_site = fiber.park_call_site.load(std::memory_order_acquire);
  e.frame = fiber.park_frame.load(std::memory_order_acquire);
  // Written once, when it first ran (SchedulerCore::start_fiber), before
  // the switch-in whose count we read with acquire above: a parked fiber
  // has run.
  e.low = reinterpret_cast<std::uintptr_t>(fiber.context.stack_bottom);
  e.high = e.low + fiber.context.stack_size;
  if (e.call_site != 0 && e.frame % kWord == 0 && e.frame >= e.low && e.frame < e.high)
    e.window_bytes = std::min<std::uintptr_t>(kWindowBytes, e.high - e.frame);
}

void ParkedStackWalker::read_windows() {
  iovec local[kBatchSize], remote[kBatchSize];
  std::size_t index[kBatchSize];  // iovec -> entry
  std::size_t n = 0;
  for (std::size_t i = 0; i < count_; ++i) {
    if (entries_[i].window_bytes == 0) continue;
    local[n] = {windows_.get() + i * kWindowBytes / kWord, entries_[i].window_bytes};
    remote[n] = {reinterpret_cast<void*>(entries_[i].frame), entries_[i].window_bytes};
    index[n++] = i;
  }
  if (n == 0) return;
  // The kernel stops at the first iovec it cannot read in full; the
  // entries before it are read, the others read their frames one by one.
  ssize_t done = ::process_vm_readv(pid_, local, n, remote, n, 0);
  for (std::size_t k = 0; k < n && done > 0; ++k) {
    if (static_cast<std::size_t>(done) < remote[k].iov_len) break;
    entries_[index[k]].window_read = true;
    done -= static_cast<ssize_t>(remote[k].iov_len);
  }
}

void ParkedStackWalker::walk_one(Entry& e, const std::uintptr_t* window) {
  std::vector<std::uintptr_t>& stack = *e.out;
  stack.clear();
  if (e.call_site == 0) return;
  stack.reserve(8);
  stack.push_back(e.call_site);
  const FrameReader reader(pid_, e.low, e.high, e.frame, e.window_read ? window : nullptr, e.window_bytes);
  std::uintptr_t frame = e.frame, saved_frame = 0, return_address = 0;
  // park()'s own frame: its return address must be the recorded call site,
  // or the frame is not (any more) park()'s.
  bool consistent = reader.read(frame, saved_frame, return_address) && return_address == e.call_site;
  while (consistent && stack.size() < kMaxStackFrames && saved_frame > frame) {
    frame = saved_frame;
    if (!reader.read(frame, saved_frame, return_address) || return_address == 0) break;
    stack.push_back(return_address);
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  const bool moved = e.fiber->counters.active.load(std::memory_order_acquire) != e.active ||
                     e.fiber->state.load(std::memory_order_acquire) != FiberState::parked;
  if (moved) stack.clear();
}

void ParkedStackWalker::walk() {
  read_windows();
  for (std::size_t i = 0; i < count_; ++i) walk_one(entries_[i], windows_.get() + i * kWindowBytes / kWord);
  count_ = 0;
}

}  // namespace weft::detail
