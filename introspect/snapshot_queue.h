// Snapshots asked for by weft-dump's clients, taken on the server's own
// thread, one at a time: Boost.Stacktrace keeps its symbol tables
// (libbacktrace's state: every loaded object's debug information) per
// thread, so on a thread per client each dump would read them afresh, and
// leak them.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "dump_format.h"

namespace weft::detail {

struct SnapshotRequest {
  DumpDetail detail = DumpDetail::full;
  ProcessSnapshot process;
  std::string error;  // why it could not be taken
  bool done = false;
};

class SnapshotQueue {
 public:
  SnapshotQueue() = default;
  SnapshotQueue(const SnapshotQueue&) = delete;
  SnapshotQueue& operator=(const SnapshotQueue&) = delete;
  ~SnapshotQueue() { close_fd(); }

  // Makes the eventfd the server polls; false if it could not.
  bool open();
  void close_fd() noexcept;
  // Readable while a request waits.
  int fd() const noexcept { return fd_; }

  // A client's thread: hands `wanted` to the server's thread and waits for
  // it; false if the server stopped first.
  bool request(SnapshotRequest& wanted);
  // The server's thread: takes every snapshot asked for so far, with `take`.
  void serve(const std::function<ProcessSnapshot(DumpDetail)>& take);
  // The server stops: waiting clients give up, and new ones are refused
  // until open().
  void stop();

  // fork(): held across it; the child drops the parent's requests.
  void lock() { lock_.lock(); }
  void unlock() { lock_.unlock(); }
  void forget_in_child() noexcept;

 private:
  std::mutex lock_;  // queue_, each request's done, stopping_
  std::condition_variable done_;
  std::vector<SnapshotRequest*> queue_;
  int fd_ = -1;  // an eventfd: a request is queued
  bool stopping_ = false;
};

}  // namespace weft::detail
