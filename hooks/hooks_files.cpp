// Regular files from a fiber: reads that the page cache serves are made
// at once; the others, at an offset, go to the scheduler's io_uring
// (io/file_ring.h) while the fiber parks. fsync, fdatasync and sync_file_range are made on
// the calling thread, announced as sleeping always (below).
//
// A read at an offset first tries preadv2(RWF_NOWAIT), which returns what
// is cached without waiting for the disk (EAGAIN if it would wait), where
// an io_uring round trip costs more (docs/benchmarks.md, "Regular
// files"). What is not cached (EAGAIN, or the rest of a read that was
// cached in part, unless the file ends there) goes to the ring. A read at
// the file position is one plain call, announced, as read(2) holds the
// position's lock throughout (read_file). A file that does not support
// RWF_NOWAIT (EOPNOTSUPP) is read as before. Once the cache has
// served an fd's last FdRecord::kTrustCache reads whole, its reads at an
// offset are the plain pread, announced, since preadv2's vectored path costs
// about a fifth more in the kernel than pread's ("Cached reads"), until
// sysmon judges one blocked.
//
// Writes are passed through: a buffered write copies into the page cache,
// and measured here an io_uring write was slower than write(2) for small
// and large writes alike, while RWF_NOWAIT is refused for buffered writes
// on ext4 (EOPNOTSUPP). It is the flush (fsync) that waits for the disk.
//
// Where io_uring is unavailable (io_uring_setup failed: ENOSYS, EPERM
// under kernel.io_uring_disabled or seccomp) every call is libc's.
// Results, partial counts and errno are libc's: a ring request returns
// -errno, which the hook turns into -1 and errno.
#undef _FILE_OFFSET_BITS
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <vector>

#include "../io/file_ring.h"
#include "../sched/current.h"
#include "../sched/scheduler_core.h"
#include "announced.h"
#include "cache_trust.h"
#include "fd_table.h"
#include "file_io.h"
#include "hook_support.h"
#include "iovecs.h"
#include "real_calls.h"

extern "C" [[noreturn]] void __chk_fail(void);

namespace weft::detail {
namespace {

FileRing* current_ring() {
  FiberControl* fiber = current_fiber();
  return fiber == nullptr ? nullptr : FileRing::of(*fiber->scheduler);
}

// A ring call's result as libc gives it: -1 and errno for -errno.
long as_libc(int result) {
  if (result < 0) {
    set_errno(-result);
    return -1;
  }
  return result;
}

// libc's read: at `offset`, or at the file position (-1); pread and read
// for one buffer, whose kernel path is shorter than the vectored calls'.
ssize_t plain_read(int fd, const iovec* iov, int count, off_t offset) {
  if (count == 1)
    return offset < 0 ? real::read()(fd, iov[0].iov_base, iov[0].iov_len)
                      : real::pread()(fd, iov[0].iov_base, iov[0].iov_len, offset);
  return offset < 0 ? real::readv()(fd, iov, count) : real::preadv()(fd, iov, count, offset);
}

// The most one read moves: the kernel's MAX_RW_COUNT, INT_MAX rounded
// down to a page. A read asked for more returns that much.
std::size_t max_read_bytes() noexcept {
  static const std::size_t max = std::size_t(INT_MAX) & ~(std::size_t(sysconf(_SC_PAGESIZE)) - 1);
  return max;
}

// The blocking read, announced.
ssize_t blocking_read(int fd, const iovec* iov, int count, off_t offset) {
  return announced([&] { return plain_read(fd, iov, count, offset); });
}

// What is left of a read of `iov` at `offset` after its first `done`
// bytes.
struct Rest {
  std::vector<iovec> iov;
  off_t offset;
};
Rest rest_of(const iovec* iov, int count, off_t offset, ssize_t done) {
  Rest rest{{iov, iov + count}, offset + done};
  drop_front(rest.iov, size_t(done));
  return rest;
}

// The page cache served a read of `file` whole, the fd's `served`-th in a
// row; or it could not (or sysmon judged the read blocked). Kept for the
// fd and for its file (hooks/cache_trust.h), which move together.
void count_served(FdRecord& file, std::uint8_t served) noexcept {
  file.cached_reads.store(served + 1, std::memory_order_relaxed);
  cache_served(file.file_key.load(std::memory_order_relaxed));
}
void count_missed(FdRecord& file) noexcept {
  file.cached_reads.store(0, std::memory_order_relaxed);
  distrust_cache(file.file_key.load(std::memory_order_relaxed));
}

}  // namespace

ssize_t read_file(FdRecord& file, int fd, void* buf, size_t n, off_t offset) {
  // More than one read moves: the plain call, whose kernel checks the
  // whole range it was given (EFAULT where it runs past the process's
  // memory), where preadv2 trims the count to max_read_bytes() first.
  // Nothing: the plain call too, whose kernel still reads the file (a
  // directory's EISDIR), where preadv2 returns 0 for an empty transfer.
  const iovec iov{buf, n};
  if (n == 0 || n > max_read_bytes()) return blocking_read(fd, &iov, 1, offset);
  return read_file(file, fd, &iov, 1, offset);
}

FdRecord* unpollable_file(FdRecord* record) noexcept {
  return record != nullptr && record->kind() == FdKind::unpollable ? record : nullptr;
}

FdRecord* unpollable_file(int fd) noexcept { return unpollable_file(classified_fd_state(fd)); }

ssize_t read_file(FdRecord& file, int fd, const iovec* iov, int count, off_t offset) {
  const std::uint8_t served = file.cached_reads.load(std::memory_order_relaxed);
  if (offset < 0 || served >= FdRecord::kTrustCache) {
    // At the file position, one call, the plain one: read(2) holds the
    // lock on the position for the whole read, so a read made of several
    // calls (RWF_NOWAIT, then the rest, or a second RWF_NOWAIT to find the
    // end) would let another reader or an lseek of the same open file
    // description in between: a read's bytes not contiguous, or more bytes
    // than the file holds. At an offset, once the cache served this fd's
    // last reads whole: the plain call, as a thread makes it, since
    // preadv2's vectored path costs more than pread's (docs/benchmarks.md,
    // "Cached reads"). Announced: if the cache does not have it after
    // all, the worker's other fibers are handed off, and a read sysmon
    // judged blocked sends the fd's next reads back to RWF_NOWAIT and the
    // ring.
    Worker* const worker = enter_blocking_call();
    const ssize_t result = plain_read(fd, iov, count, offset);
    if (exit_blocking_call(worker)) count_missed(file);
    return result;
  }
  // A file that refused RWF_NOWAIT before (tmpfs, /proc, /sys): the plain
  // call at once, without the preadv2 that would be refused again.
  if (file.refuses_nowait_reads()) return blocking_read(fd, iov, count, offset);
  const ErrnoHome home;
  const int saved = errno_value();
  ssize_t cached = real::preadv2()(fd, iov, count, offset, RWF_NOWAIT);
  if (cached >= 0) {
    const ssize_t wanted = ssize_t(std::min(iov_total(iov, count), max_read_bytes()));
    // Short: the cache had only part of it, or the file ends there. The
    // end of a file is the common case (every read of a whole file ends
    // so), and another RWF_NOWAIT read tells them apart (0: the end) for a
    // system call instead of a ring round trip that returns 0; EAGAIN: the
    // rest waits for the disk.
    bool at_end = false;
    while (!at_end && cached > 0 && cached < wanted) {
      const Rest rest = rest_of(iov, count, offset, cached);
      const ssize_t more = real::preadv2()(fd, rest.iov.data(), int(rest.iov.size()), rest.offset, RWF_NOWAIT);
      if (more < 0) break;
      at_end = more == 0;
      cached += more;
    }
    if (cached == 0 || cached >= wanted || at_end) {
      if (cached > 0) count_served(file, served);
      return cached;
    }
  } else if (errno_value() != EAGAIN) {
    // EOPNOTSUPP (or EINVAL before Linux 4.14, ENOSYS before 4.6): no
    // RWF_NOWAIT for this file; anything else (EBADF, EISDIR...) is the
    // read's own. An EINVAL of the read's own comes back from the read.
    const int error = errno_value();
    if (error != EOPNOTSUPP && error != EINVAL && error != ENOSYS) return -1;
    // Remembered for the fd's next reads; not an EINVAL, which may be the
    // read's own.
    if (error != EINVAL) file.set_bit(FdRecord::no_nowait_read_bit, true);
    set_errno(saved);
    return blocking_read(fd, iov, count, offset);
  }
  // The rest, past what the cache gave: on the ring while the fiber parks.
  count_missed(file);
  const ssize_t done = std::max<ssize_t>(cached, 0);
  const Rest rest = rest_of(iov, count, offset, done);
  FileRing* ring = current_ring();
  ssize_t more;
  if (ring == nullptr) {
    more = blocking_read(fd, rest.iov.data(), int(rest.iov.size()), rest.offset);
  } else {
    const ParkScope park;
    more = as_libc(ring->readv(fd, rest.iov.data(), unsigned(rest.iov.size()), rest.offset));
  }
  // A partial read, then an error: the count, and errno untouched, as the
  // kernel gives a read that stops short.
  if (more < 0 && done == 0) return -1;
  set_errno(saved);
  return done + std::max<ssize_t>(more, 0);
}

namespace {

// preadv2 and pwritev2, given libc's call and the hooks of the same
// transfer without flags: at the file position (readv, writev: offset -1)
// and at an offset (preadv, pwritev), which they then are. With RWF_NOWAIT
// they never wait: libc's call. With any other flag (RWF_HIPRI, RWF_DSYNC,
// RWF_SYNC, RWF_APPEND: regular files), the call, announced; on a pipe,
// socket or terminal as a wait for its other party (sleeps_on_fds).
template <class Real, class AtPosition, class AtOffset>
ssize_t flagged_transfer(Real real, AtPosition at_position, AtOffset at_offset, int fd, const iovec* iov, int count,
                         off_t offset, int flags) {
  if (!parking_enabled() || (flags & RWF_NOWAIT) != 0) return real(fd, iov, count, offset, flags);
  if (flags == 0) return offset == -1 ? at_position(fd, iov, count) : at_offset(fd, iov, count, offset);
  return announced_hook([&] { return real(fd, iov, count, offset, flags); }, sleeps_on_fds(fd));
}

ssize_t pread_hooked(int fd, void* buf, size_t n, off_t offset) {
  FdRecord* const file = parking_enabled() ? unpollable_file(fd) : nullptr;
  if (file == nullptr) return real::pread()(fd, buf, n, offset);
  const CheckpointOnReturn at_return;
  if (offset < 0) return real::pread()(fd, buf, n, offset);  // EINVAL, as libc says it
  return read_file(*file, fd, buf, n, offset);
}

}  // namespace

}  // namespace weft::detail

using namespace weft::detail;

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

ssize_t pread(int fd, void* buf, size_t n, off_t offset) { return pread_hooked(fd, buf, n, offset); }
ssize_t pread64(int fd, void* buf, size_t n, off_t offset) { return pread_hooked(fd, buf, n, offset); }

ssize_t __pread_chk(int fd, void* buf, size_t n, off_t offset, size_t buf_len) {
  if (n > buf_len) __chk_fail();
  return pread_hooked(fd, buf, n, offset);
}
ssize_t __pread64_chk(int fd, void* buf, size_t n, off_t offset, size_t buf_len) {
  if (n > buf_len) __chk_fail();
  return pread_hooked(fd, buf, n, offset);
}

ssize_t preadv(int fd, const iovec* iov, int count, off_t offset) {
  FdRecord* const file = parking_enabled() && offset >= 0 && count > 0 ? unpollable_file(fd) : nullptr;
  if (file == nullptr) return real::preadv()(fd, iov, count, offset);
  const CheckpointOnReturn at_return;
  return read_file(*file, fd, iov, count, offset);
}
ssize_t preadv64(int fd, const iovec* iov, int count, off_t offset) { return preadv(fd, iov, count, offset); }

ssize_t preadv2(int fd, const iovec* iov, int count, off_t offset, int flags) {
  return flagged_transfer(real::preadv2(), readv, preadv, fd, iov, count, offset, flags);
}
ssize_t preadv64v2(int fd, const iovec* iov, int count, off64_t offset, int flags) {
  return preadv2(fd, iov, count, offset, flags);
}
ssize_t pwritev2(int fd, const iovec* iov, int count, off_t offset, int flags) {
  return flagged_transfer(real::pwritev2(), writev, pwritev, fd, iov, count, offset, flags);
}
ssize_t pwritev64v2(int fd, const iovec* iov, int count, off64_t offset, int flags) {
  return pwritev2(fd, iov, count, offset, flags);
}

// fsync and fdatasync on the calling thread, announced as sleeping every
// time: the worker's queued fibers go to other threads at once, and a
// hundred fibers flushing at once come to run on a hundred threads, each
// woken by the kernel as a plain thread is. Through the ring each flush
// cost an io-wq thread's wake-up and the completion's, and its fiber
// waited for its worker after it (docs/benchmarks.md, "fsync: a hand-off
// at the call's entry").
int fsync(int fd) {
  return announced_hook([&] { return real::fsync()(fd); }, Sleeps::always);
}
int fdatasync(int fd) {
  return announced_hook([&] { return real::fdatasync()(fd); }, Sleeps::always);
}

// As fsync: on the calling thread, announced as sleeping always when it
// waits for the writeback (a WAIT flag), else as maybe sleeping (a WRITE
// alone starts it). Through the ring, 100 fibers writing 4 KiB and
// syncing the range ran well below threads' throughput (docs/benchmarks.md,
// "fsync: a hand-off at the call's entry").
int sync_file_range(int fd, off_t offset, off_t length, unsigned int flags) {
  constexpr unsigned kWaits = SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WAIT_AFTER;
  return announced_hook([&] { return real::sync_file_range()(fd, offset, length, flags); },
                        (flags & kWaits) != 0 ? Sleeps::always : Sleeps::maybe);
}

#pragma GCC visibility pop
}  // extern "C"
