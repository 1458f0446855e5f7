// FdRecords: the netpoller's per-fd state, one record per fd number for
// the whole process (an fd number is the process's, whichever scheduler
// waits on it), in a lazily grown two-level table.
//
// Records are type-stable: allocated on first use of their fd range and
// never freed, so an epoll event that names a closed fd can always be
// looked up, and then dropped because its generation is stale (Go's
// pollDesc "must be type-stable"; its fdseq).
#pragma once

#include <weft/detail/spin_lock.h>
#include <weft/detail/wait_list.h>

#include <atomic>
#include <cstdint>

namespace weft::detail {

struct alignas(64) FdRecord {
  // Guards everything below except the atomics, which are read without it.
  SpinLock lock;
  // Bumped by fd_closing(): an event carries the generation it was
  // registered with, and one that does not match is stale.
  std::uint32_t generation = 0;
  // Per direction (FdDirection: read 0, write 1): readiness edges seen by a
  // poller, and the fibers parked until the next one. Written under `lock`;
  // a waiter reads its counter before polling the fd and compares it under
  // the lock before parking (io/netpoller.h, "Waiting").
  std::atomic<std::uint32_t> events[2] = {0, 0};
  WaitList waiters[2];
  // Set (before the counters move) by a poller that reports a hang-up,
  // the peer's shutdown or an error, which stay readable once seen and
  // raise no further edge; cleared with the generation. A short read is
  // no proof of a drained fd while it is set (fd_note_drained).
  std::atomic<bool> hung_up{false};
  // The poller this fd was added to, by its never-reused id (0: none), and
  // whether other pollers (other schedulers) added it too.
  std::uint64_t poller_id = 0;
  bool in_other_pollers = false;
};

class FdRecords {
 public:
  // Fds from 0 to this limit less one have records (2^24, far above any
  // RLIMIT_NOFILE seen in practice: Linux's nr_open defaults to 2^20).
  static constexpr int kChunkBits = 12;
  static constexpr int kChunks = 4096;
  static constexpr int kLimit = kChunks << kChunkBits;

  // The record of `fd`, allocating its chunk on first use. `fd` must be in
  // [0, kLimit).
  FdRecord& get(int fd);
  // The record if its chunk exists, else null (fd_closing's cheap path).
  FdRecord* find(int fd) const noexcept;

 private:
  std::atomic<FdRecord*> chunks_[kChunks] = {};
};

// The process's records.
FdRecords& fd_records() noexcept;

}  // namespace weft::detail
