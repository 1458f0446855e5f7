#include "file_ring.h"

#include <cerrno>

#include "../runtime/fast_clock.h"
#include "../sched/scheduler_core.h"
#include "netpoller.h"

// After weft's headers: liburing brings linux/fs.h, whose BLOCK_SIZE macro
// would rename a constant of concurrentqueue's.
#include <liburing.h>

namespace weft::detail {

struct FileRing::Op {
  Waiter waiter;
  void (*prepare)(io_uring_sqe*, void*);
  void* arg;
  int result = 0;
  bool done = false;
  bool promoted = false;
};

namespace {

// Enough for a few hundred fibers' requests in flight; more wait in the
// kernel's overflow list (IORING_FEAT_NODROP) rather than being lost.
constexpr unsigned kEntries = 256;
constexpr unsigned kIoWorkers = 512;

}  // namespace

bool FileRing::set_up() {
  ring_ = std::make_unique<io_uring>();
  io_uring_params params{};
  params.flags = IORING_SETUP_CQSIZE;
  params.cq_entries = kEntries * 4;
  // NODROP: no completion is lost when more are in flight than the queue
  // holds; RW_CUR_POS: offset -1 reads at the file position (read()).
  constexpr unsigned kNeeded = IORING_FEAT_NODROP | IORING_FEAT_RW_CUR_POS;
  if (const int failed = io_uring_queue_init_params(kEntries, ring_.get(), &params); failed != 0) {
    ring_.reset();
    return failed != -EMFILE && failed != -ENFILE && failed != -ENOMEM;
  }
  if ((params.features & kNeeded) != kNeeded) {
    io_uring_queue_exit(ring_.get());
    ring_.reset();
    return true;
  }
  ring_fd_ = ring_->ring_fd;
  // The kernel's io-wq runs the requests that wait (a read from the disk,
  // a writeback), by default at most 4 per CPU at once: fewer in flight
  // than fibers waiting, where threads would each have one in the kernel.
  // Bounded work gets as many as the blocking pool's default.
  unsigned workers[2] = {kIoWorkers, 0};
  io_uring_register_iowq_max_workers(ring_.get(), workers);
  return true;
}

FileRing::~FileRing() {
  if (ring_ == nullptr) return;
  // After every fiber has finished: nothing is in flight.
  fd_closing(ring_fd_);
  io_uring_queue_exit(ring_.get());
}

std::unique_ptr<Extension> FileRing::make(const Config&) { return std::make_unique<FileRing>(); }

FileRing* FileRing::of(SchedulerCore& core) {
  FileRing* ring = core.find_extension<FileRing>();
  if (ring == nullptr) return nullptr;
  if (!ring->set_up_done_.load(std::memory_order_acquire)) {
    if (fast_now_ns() < ring->retry_set_up_at_ns_.load(std::memory_order_relaxed)) return nullptr;
    std::lock_guard guard(ring->set_up_lock_);
    if (!ring->set_up_done_.load(std::memory_order_relaxed)) {
      if (!ring->set_up()) {
        ring->retry_set_up_at_ns_.store(fast_now_ns() + 1'000'000'000, std::memory_order_relaxed);
        return nullptr;
      }
      ring->set_up_done_.store(true, std::memory_order_release);
    }
  }
  return ring->ring_ != nullptr ? ring : nullptr;
}

int FileRing::submit_locked(Op& op) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  if (sqe == nullptr) {
    // Every SQE is consumed at submit, so the queue is full only if a
    // submit failed; try to flush it once.
    io_uring_submit(ring_.get());
    sqe = io_uring_get_sqe(ring_.get());
    if (sqe == nullptr) return -EAGAIN;
  }
  op.prepare(sqe, op.arg);
  io_uring_sqe_set_data(sqe, &op);
  for (;;) {
    const int submitted = io_uring_submit(ring_.get());
    if (submitted >= 0) break;
    if (submitted != -EINTR) return submitted;
  }
  ++submitted_;
  return 0;
}

int FileRing::run(void (*prepare)(io_uring_sqe*, void*), void* arg) {
  Op op;
  op.prepare = prepare;
  op.arg = arg;
  op.waiter.payload = &op;
  lock_.lock();
  if (const int failed = submit_locked(op); failed < 0) {
    lock_.unlock();
    return failed;
  }
  if (!leading_) {
    leading_ = true;
    lock_.unlock();
    lead(op);
    return op.result;
  }
  waiting_.push_back(op.waiter);
  park(op.waiter, &lock_, {"weft::FileRing", this, "file I/O"});
  if (op.promoted) lead(op);
  return op.result;
}

int FileRing::readv(int fd, const iovec* iov, unsigned count, off_t offset) {
  return run([&](io_uring_sqe* sqe) { io_uring_prep_readv(sqe, fd, iov, count, static_cast<__u64>(offset)); });
}

void FileRing::lead(Op& op) {
  for (;;) {
    lock_.lock();
    reap_locked();
    if (op.done) {
      if (Waiter* next = waiting_.pop_front()) {
        static_cast<Op*>(next->payload)->promoted = true;
        unpark(*next);
      } else {
        leading_ = false;
      }
      lock_.unlock();
      return;
    }
    lock_.unlock();
    wait_fd(ring_fd_, FdDirection::read, no_deadline);
  }
}

void FileRing::reap_locked() {
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(ring_.get(), &cqe) == 0) {
    Op& op = *static_cast<Op*>(io_uring_cqe_get_data(cqe));
    const int result = cqe->res;
    io_uring_cqe_seen(ring_.get(), cqe);
    if (result == -ECANCELED && submit_locked(op) == 0) {
      ++resubmitted_;
      continue;
    }
    op.result = result;
    op.done = true;
    // The leader's own Op is not linked; every other one is, and its
    // fiber resumes with the result (its frame holds `op`: do not touch
    // it after the unpark).
    if (op.waiter.linked) {
      waiting_.remove(op.waiter);
      unpark(op.waiter);
    }
  }
}

FileRing::Stats FileRing::stats() const noexcept {
  lock_.lock();
  const Stats stats{submitted_, resubmitted_};
  lock_.unlock();
  return stats;
}

}  // namespace weft::detail
