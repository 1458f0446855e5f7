#include "snapshot_queue.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <exception>
#include <new>

namespace weft::detail {

bool SnapshotQueue::open() {
  fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::lock_guard guard(lock_);
  stopping_ = false;
  return fd_ >= 0;
}

void SnapshotQueue::close_fd() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool SnapshotQueue::request(SnapshotRequest& wanted) {
  std::unique_lock guard(lock_);
  if (stopping_) return false;
  queue_.push_back(&wanted);
  const std::uint64_t one = 1;
  while (::write(fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  done_.wait(guard, [&] { return wanted.done || stopping_; });
  if (!wanted.done) queue_.erase(std::remove(queue_.begin(), queue_.end(), &wanted), queue_.end());
  return wanted.done;
}

void SnapshotQueue::serve(const std::function<ProcessSnapshot(DumpDetail)>& take) {
  std::uint64_t count;
  [[maybe_unused]] const ssize_t n = ::read(fd_, &count, sizeof(count));
  for (;;) {
    SnapshotRequest* wanted;
    {
      std::lock_guard guard(lock_);
      if (queue_.empty()) return;
      wanted = queue_.front();
      queue_.erase(queue_.begin());
    }
    try {
      wanted->process = take(wanted->detail);
    } catch (const std::exception& e) {
      wanted->error = e.what();
    }
    {
      std::lock_guard guard(lock_);
      wanted->done = true;
    }
    done_.notify_all();
  }
}

void SnapshotQueue::stop() {
  {
    std::lock_guard guard(lock_);
    stopping_ = true;
  }
  done_.notify_all();
}

void SnapshotQueue::forget_in_child() noexcept {
  queue_.clear();                          // the parent's clients' requests
  new (&done_) std::condition_variable();  // and their waits
  close_fd();
}

}  // namespace weft::detail
