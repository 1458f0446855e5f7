// FdRecords: one record per fd number for the whole process (an fd number
// is the process's, whichever scheduler or thread uses it), in a lazily
// grown two-level table. A record is what weft knows of the fd: the
// netpoller's wait state (waiters, event counters, the poller it was
// added to) and the fd's description as its user sees it (what kind of fd,
// whether the user made it non-blocking), which the libc hooks keep
// (hooks/fd_table.h). Go's pollDesc is the model: one record, one
// generation, and a hooked read() visits it once.
//
// Records are type-stable: allocated on first use of their fd range and
// never freed, so an epoll event that names a closed fd can always be
// looked up, and then dropped because its generation is stale (Go's
// pollDesc "must be type-stable"; its fdseq), and a hook may hold its
// record across a park (the fd may be closed meanwhile; the record is then
// reset, never freed). The chunks are mmap'ed, not new'ed: the hooks reach
// the table before main, inside malloc's callers and in a forked child.
#pragma once

#include <weft/detail/spin_lock.h>
#include <weft/detail/wait_list.h>

#include <atomic>
#include <cstdint>
#include <new>

namespace weft::detail {

// What an fd is, for the calls that wait on it.
enum class FdKind : std::uint32_t {
  unknown = 0,     // not classified yet
  socket = 1,      // attempted with MSG_DONTWAIT, parked on EAGAIN
  pollable = 2,    // pipes, FIFOs, terminals, eventfds: waited for, then called
  unpollable = 3,  // regular files, directories, block devices: passed through
};

struct alignas(64) FdRecord {
  // --- the netpoller's (io/netpoller.h) -------------------------------------

  // Guards the waiter lists and the poller fields; the atomics are read
  // without it.
  SpinLock lock;
  // Bumped (under `lock`) when the fd closes or a new fd takes the number:
  // an epoll event carries the generation it was registered with, and one
  // that does not match is stale; a hook that parked and wakes to another
  // generation knows its fd is gone (EBADF), even if the number was reused.
  std::atomic<std::uint32_t> generation{0};
  // Per direction (FdDirection: read 0, write 1): readiness edges seen by a
  // poller, and the fibers parked until the next one. Written under `lock`;
  // a waiter reads its counter before polling the fd and compares it under
  // the lock before parking (io/netpoller.h, "Waiting").
  std::atomic<std::uint32_t> events[2] = {0, 0};
  WaitList waiters[2];
  // Bumped (under `lock`) by fd_wake_waiters: a wait whose mark saw an
  // older count returns ready without polling (the change that woke the
  // others, a unix socket's shutdown, raised no readiness to poll).
  std::atomic<std::uint32_t> calls_woken{0};
  // Set (before the counters move) by a poller that reports a hang-up,
  // the peer's shutdown or an error, which stay readable once seen and
  // raise no further edge, or urgent data (a TCP read stops short at its
  // mark, with the rest queued and no edge to come); cleared with the
  // generation. A short read is no proof of a drained fd while it is set
  // (fd_note_drained).
  std::atomic<bool> short_read_inconclusive{false};
  // Whether other pollers (other schedulers) added the fd too, besides
  // `poller_id`'s.
  bool in_other_pollers = false;
  // The poller this fd was added to, by its never-reused id (0: none).
  std::uint64_t poller_id = 0;
  // The last waiter linked in waiters[0] (read) and its fiber's control
  // block, stored at its link: a poller prefetches them with the record
  // (Poller::poll), before it takes the lock. Only ever prefetched, never
  // followed: they may be long gone.
  std::atomic<const void*> read_waiter_hint{nullptr};
  std::atomic<const void*> read_fiber_hint{nullptr};

  // --- the fd's description, kept by the libc hooks (hooks/fd_table.h) ------

  static constexpr std::uint32_t kind_mask = 3;
  static constexpr std::uint32_t user_nonblock_bit = 4;  // the user's O_NONBLOCK
  static constexpr std::uint32_t flipped_bit = 8;        // weft set O_NONBLOCK for a moment
  static constexpr std::uint32_t stream_bit = 16;        // a SOCK_STREAM socket
  // Refuses RWF_NOWAIT for reads, or for writes: a pollable fd is waited
  // for, then called; a file is read with the plain call, announced. Apart
  // for each direction: an eventfd takes the flag for reads (it has a
  // read_iter) and refuses it for writes (no write_iter), and with one bit
  // for both its reads went to the wait-then-call too, where a second
  // reader beaten to the count blocked its worker in read(2).
  static constexpr std::uint32_t no_nowait_read_bit = 32;
  static constexpr std::uint32_t no_nowait_write_bit = 16384;
  // The fd was closed, or a new fd took its number, in a signal handler,
  // where the record's lock could not be taken (the code the handler
  // interrupted may hold it): the rest of the record is stale until
  // fd_renew_if_changed (io/netpoller.h). Stored alone, so the kind reads
  // unknown meanwhile.
  static constexpr std::uint32_t changed_in_handler_bit = 64;
  // Whether this process alone may hold the open file description
  // (hooks/description_sharing.h): made here and never passed on since;
  // with FD_CLOEXEC since before any posix_spawn after that.
  static constexpr std::uint32_t made_here_bit = 128;
  static constexpr std::uint32_t cloexec_bit = 256;
  // A TCP socket: a short read drained it (epoll(7)), unless urgent data
  // came (short_read_inconclusive). Not a unix stream socket: its read
  // also stops after a segment that carried fds (or at a change of
  // credentials), with the rest queued.
  static constexpr std::uint32_t short_read_drains_bit = 512;
  // The user set a negative SO_RCVTIMEO (read) or SO_SNDTIMEO (write)
  // through this fd, which the kernel keeps as "at once" (the call fails
  // with EAGAIN instead of waiting) but getsockopt reports as {0, 0}, as
  // it reports "none" (hooks/fd_table.h, socket_timeout_ns).
  static constexpr std::uint32_t recv_timeout_at_once_bit = 1024;
  static constexpr std::uint32_t send_timeout_at_once_bit = 2048;
  // A signalfd: what it reports depends on the thread that reads or polls
  // it (that thread's pending signals beside the process's), so a
  // netpoller's thread never sees a signal sent to the reader's thread
  // alone. Read with the plain call, announced (hooks_io_calls.cpp).
  static constexpr std::uint32_t signalfd_bit = 4096;
  // An eventfd or timerfd: its read or write of fewer bytes than its 8-byte
  // counter fails with EINVAL at once, before any wait, so it is the plain
  // call (waited for first, it parked until the counter moved: for good
  // if it never did).
  static constexpr std::uint32_t counter_bit = 8192;
  // An epoll fd that holds, or held, an fd whose readiness is the asking
  // thread's own (hooks/fd_table.h, readiness_is_the_callers): a signalfd,
  // a file with a poll of its own, or another epoll marked so. Set by the
  // epoll_ctl hook at an ADD and kept while the fd lives (a DEL of one
  // such fd may leave another).
  static constexpr std::uint32_t holds_callers_readiness_bit = 32768;

  std::atomic<std::uint32_t> flags{0};
  // Counts weft's O_NONBLOCK flips: a plain thread whose blocking accept
  // got EAGAIN retries only if a flip began meanwhile (EAGAIN is also
  // what SO_RCVTIMEO gives).
  std::atomic<std::uint32_t> flips{0};
  // The socket's SO_RCVTIMEO and SO_SNDTIMEO in nanoseconds (0: none, as
  // for the kernel) and its SO_RCVLOWAT, as read with getsockopt when the
  // process's count of changes to those options was `options_read_at` (0:
  // never read). Guarded by `lock` (hooks/fd_table.h, socket_timeout_ns).
  std::int64_t recv_timeout_ns = 0;
  std::int64_t send_timeout_ns = 0;
  std::uint32_t options_read_at = 0;
  std::int32_t recv_lowat = 1;
  // Serialises weft's O_NONBLOCK flips (connect, accept) with each other
  // and with the user's F_SETFL, so a flip never restores stale flags.
  SpinLock flip_lock;
  // A fiber of this process is in the blocking accept of a listener that
  // may be shared (hooks_io_calls.cpp, accept_shared): the others wait.
  std::atomic<bool> accepting{false};
  // A regular file's reads in a row that the page cache served whole
  // (hooks_files.cpp, read_file), up to kTrustCache; a hint, reset by a
  // read it could not serve.
  static constexpr std::uint8_t kTrustCache = 8;
  std::atomic<std::uint8_t> cached_reads{0};
  // The process's forks and spawns that had returned when the description
  // was made here (made_here_bit; hooks/description_sharing.h).
  std::atomic<std::uint32_t> made_at_forks{0};
  std::atomic<std::uint32_t> made_at_spawns{0};
  // A regular file's key in the hooks' table of files the cache serves
  // (hooks/cache_trust.h), from its classification; 0: none. 32 bits: the
  // record stays within two cache lines.
  std::atomic<std::uint32_t> file_key{0};

  FdKind kind() const noexcept { return FdKind(flags.load(std::memory_order_relaxed) & kind_mask); }
  bool user_nonblock() const noexcept { return flags.load(std::memory_order_relaxed) & user_nonblock_bit; }
  bool flipped() const noexcept { return flags.load(std::memory_order_relaxed) & flipped_bit; }
  bool stream() const noexcept { return flags.load(std::memory_order_relaxed) & stream_bit; }
  bool short_read_drains() const noexcept { return flags.load(std::memory_order_relaxed) & short_read_drains_bit; }
  bool signalfd() const noexcept { return flags.load(std::memory_order_relaxed) & signalfd_bit; }
  bool counter() const noexcept { return flags.load(std::memory_order_relaxed) & counter_bit; }
  bool holds_callers_readiness() const noexcept {
    return flags.load(std::memory_order_relaxed) & holds_callers_readiness_bit;
  }
  bool refuses_nowait_reads() const noexcept { return flags.load(std::memory_order_relaxed) & no_nowait_read_bit; }
  bool refuses_nowait_writes() const noexcept { return flags.load(std::memory_order_relaxed) & no_nowait_write_bit; }
  bool changed_in_handler() const noexcept { return flags.load(std::memory_order_relaxed) & changed_in_handler_bit; }
  void set_bit(std::uint32_t bit, bool on) noexcept {
    if (on)
      flags.fetch_or(bit, std::memory_order_relaxed);
    else
      flags.fetch_and(~bit, std::memory_order_relaxed);
  }
  // In a forked child, whose only thread is the one that forked: the locks
  // back to free (another thread may have held them at the fork; it does
  // not exist here), and the netpoller's state forgotten: the waiters are
  // the parent's fibers, the pollers the parent's (the child's schedulers
  // have pollers of their own). A new generation drops whatever the
  // inherited epoll instances still report. The description stays: the
  // child has the same fds, minus a flip in progress.
  void reset_in_forked_child() noexcept {
    new (&lock) SpinLock;
    new (&flip_lock) SpinLock;
    generation.store(generation.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    waiters[0] = WaitList{};
    waiters[1] = WaitList{};
    short_read_inconclusive.store(false, std::memory_order_relaxed);
    poller_id = 0;
    in_other_pollers = false;
    set_bit(flipped_bit, false);
    accepting.store(false, std::memory_order_relaxed);
  }
  // The cached socket options are read again at their next use.
  void forget_socket_options() noexcept {
    lock.lock();
    options_read_at = 0;
    lock.unlock();
  }
  void set_kind(FdKind kind) noexcept {
    std::uint32_t old = flags.load(std::memory_order_relaxed);
    while (!flags.compare_exchange_weak(old, (old & ~kind_mask) | std::uint32_t(kind), std::memory_order_relaxed)) {
    }
  }
};

// Two cache lines (file_key): a third would make every chunk of the table
// half as large again.
static_assert(sizeof(FdRecord) <= 128);

class FdRecords {
 public:
  // Fds from 0 to this limit less one have records (2^25, above fs/nr_open's
  // default of 2^20).
  static constexpr int kChunkBits = 10;
  static constexpr int kChunks = 1 << 15;
  static constexpr int kLimit = kChunks << kChunkBits;

  // The record of `fd`, allocating its chunk on first use; null for a
  // negative fd or one beyond the table, and if memory runs out.
  FdRecord* get(int fd) noexcept;
  // The record if its chunk exists, else null (the cheap path of calls
  // that have nothing to do for an fd weft never saw).
  FdRecord* find(int fd) const noexcept;
  // Calls `visit(fd, record)` for every record allocated so far.
  template <class Visit>
  void for_each(Visit&& visit) noexcept {
    for (int c = 0; c < kChunks; ++c) {
      FdRecord* chunk = chunks_[c].load(std::memory_order_acquire);
      if (chunk == nullptr) continue;
      for (int i = 0; i < (1 << kChunkBits); ++i) visit((c << kChunkBits) | i, chunk[i]);
    }
  }

 private:
  std::atomic<FdRecord*> chunks_[kChunks] = {};
};

// The process's records.
FdRecords& fd_records() noexcept;

}  // namespace weft::detail
