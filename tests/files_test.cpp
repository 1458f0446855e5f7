// Regular files from fibers (hooks/hooks_files.cpp, io/file_ring.h): reads
// the page cache cannot serve go to the scheduler's io_uring while the
// fiber parks, fsync, fdatasync and sync_file_range are the calls on the
// fiber's thread, announced; every call gives what it
// gives on a plain thread (data, counts, file position, errno). Where
// io_uring_setup is refused (a seccomp filter in a child process here, as
// kernel.io_uring_disabled or a container profile would), the calls are
// libc's.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <weft/weft.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/fd_records.h"
#include "io/file_ring.h"
#include "pool_support.h"
#include "sched/current.h"
#include "seccomp_refusal.h"
#include "test_support.h"

namespace weft {
namespace {

constexpr std::size_t kFileSize = 1 << 20;

bool on_tmpfs(const char* dir) {
  struct statfs fs {};
  return ::statfs(dir, &fs) != 0 || fs.f_type == TMPFS_MAGIC;
}

// Where the tests' files go: /var/tmp, which stays on disk where /tmp is
// tmpfs (Debian 13's default), else /tmp. On tmpfs the page cache is the
// file: nothing evicts a page, and no read waits for a disk.
const std::string& files_dir() {
  static const std::string dir = on_tmpfs("/var/tmp") ? "/tmp" : "/var/tmp";
  return dir;
}

// A new file's path (mkstemp's template) in files_dir().
std::string file_template(const std::string& name) { return files_dir() + "/weft-files-" + name + "XXXXXX"; }

// Why a read the page cache cannot serve would not go to the ring here,
// or null. The tests that need such reads skip, saying why.
const char* no_ring_reads() {
  if (on_tmpfs(files_dir().c_str()))
    return "/var/tmp and /tmp are tmpfs: no page cache to evict, no disk for a read to wait for";
  bool has_ring = false;
  Scheduler sched{test::config_with(1)};
  sched.spawn([&] { has_ring = detail::FileRing::of(*detail::current_fiber()->scheduler) != nullptr; }).join();
  if (!has_ring)
    return "weft made no io_uring here (io_uring_setup refused, kernel.io_uring_disabled, a seccomp profile, or "
           "a kernel without the features it needs): the calls are libc's, as FilesChild.WithoutIoUring checks";
  return nullptr;
}

// A file of kFileSize bytes, byte i = i * 7 % 251.
std::string make_file() {
  std::string path = file_template("");
  const int fd = ::mkstemp(path.data());
  std::vector<char> data(kFileSize);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 % 251);
  EXPECT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ::fsync(fd);
  ::close(fd);
  return path;
}

// Drops the file's pages from the page cache, so that the next read must
// wait for the disk (RWF_NOWAIT then says EAGAIN).
void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

std::uint64_t checksum(const char* data, ssize_t n) {
  std::uint64_t sum = 0;
  for (ssize_t i = 0; i < n; ++i) sum = sum * 31 + static_cast<unsigned char>(data[i]);
  return sum;
}

// Every read form on `fd`, the file at `path`, and its result, errno and
// file position, as text; closes `fd`. `evicting`: the file's pages are
// dropped before most reads, so that the page cache cannot serve them.
std::string read_forms(const std::string& path, int fd, bool evicting) {
  const auto drop_pages = [&] {
    if (evicting) evict(path);
  };
  std::ostringstream out;
  std::vector<char> buf(kFileSize + 100);
  errno = 0;
  ssize_t n = ::read(fd, buf.data(), 5000);
  out << "read " << n << " " << checksum(buf.data(), n) << " at " << ::lseek(fd, 0, SEEK_CUR) << " errno " << errno
      << "\n";
  drop_pages();
  n = ::read(fd, buf.data(), kFileSize);  // from 5000 to the end: short at EOF
  out << "read to eof " << n << " " << checksum(buf.data(), n) << " at " << ::lseek(fd, 0, SEEK_CUR) << "\n";
  n = ::read(fd, buf.data(), 10);
  out << "read at eof " << n << "\n";
  drop_pages();
  n = ::pread(fd, buf.data(), 100000, 12345);
  out << "pread " << n << " " << checksum(buf.data(), n) << " at " << ::lseek(fd, 0, SEEK_CUR) << "\n";
  n = ::pread64(fd, buf.data(), 100, static_cast<off64_t>(kFileSize) - 40);
  out << "pread64 past end " << n << " " << checksum(buf.data(), n) << "\n";
  char a[3000];
  char b[70000];
  iovec iov[2] = {{a, sizeof a}, {b, sizeof b}};
  drop_pages();
  n = ::preadv(fd, iov, 2, 777);
  out << "preadv " << n << " " << checksum(a, sizeof a) << " " << checksum(b, sizeof b) << "\n";
  ::lseek(fd, 100, SEEK_SET);
  drop_pages();
  n = ::readv(fd, iov, 2);
  out << "readv " << n << " " << checksum(a, sizeof a) << " " << checksum(b, sizeof b) << " at "
      << ::lseek(fd, 0, SEEK_CUR) << "\n";
  errno = 0;
  n = ::pread(fd, buf.data(), 0, 12345);
  out << "pread nothing " << n << " errno " << errno << "\n";
  errno = 0;
  n = ::pread(fd, buf.data(), 10, -1);
  out << "pread negative " << n << " errno " << errno << "\n";
  ::close(fd);
  errno = 0;
  n = ::read(fd, buf.data(), 10);
  out << "read closed " << n << " errno " << errno << "\n";
  // Devices epoll refuses become "unpollable" on their first use from a
  // fiber; they have no RWF_NOWAIT and are read as before.
  for (const char* device : {"/dev/zero", "/dev/null"}) {
    const int dev = ::open(device, O_RDONLY);
    for (int i = 0; i < 2; ++i) {
      n = ::read(dev, buf.data(), 10);
      out << device << " " << n << " " << checksum(buf.data(), n) << "\n";
    }
    ::close(dev);
  }
  const int dir = ::open(files_dir().c_str(), O_RDONLY | O_DIRECTORY);
  errno = 0;
  n = ::read(dir, buf.data(), 10);
  out << "read dir " << n << " errno " << errno << "\n";
  // Nothing asked: the kernel's read of a directory still fails, where
  // preadv2's empty transfer returns 0 before it looks at the file.
  errno = 0;
  n = ::pread(dir, buf.data(), 0, 0);
  out << "pread dir nothing " << n << " errno " << errno << "\n";
  ::close(dir);
  return out.str();
}

std::string reads(const std::string& path) { return read_forms(path, ::open(path.c_str(), O_RDONLY), true); }

std::string syncs(const std::string& path) {
  std::ostringstream out;
  const int fd = ::open(path.c_str(), O_RDWR);
  const char text[] = "synced";
  errno = 1234;
  out << "pwrite " << ::pwrite(fd, text, sizeof text, 10) << "\n";
  out << "fsync " << ::fsync(fd) << " errno " << errno << "\n";  // untouched on success
  out << "fdatasync " << ::fdatasync(fd) << " errno " << errno << "\n";
  out << "sync_file_range " << ::sync_file_range(fd, 0, 4096, SYNC_FILE_RANGE_WRITE) << "\n";
  errno = 0;
  out << "sync_file_range bad flags " << ::sync_file_range(fd, 0, 4096, 0x80) << " errno " << errno << "\n";
  // A closed fd far above the others: the kernel gives out the lowest free
  // number, so no other thread's new fd (the scheduler's, the sanitizer's)
  // can take this one before the call.
  const int closed = ::fcntl(fd, F_DUPFD, 1000);
  ::close(fd);
  ::close(closed);
  errno = 0;
  out << "fsync closed " << ::fsync(closed) << " errno " << errno << "\n";
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  errno = 0;
  out << "fdatasync pipe " << ::fdatasync(pipe_fds[0]) << " errno " << errno << "\n";
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  return out.str();
}

// The requests the calling fiber's scheduler's ring has taken (0 without one).
std::uint64_t ring_requests() {
  detail::FiberControl* fiber = detail::current_fiber();
  if (fiber == nullptr) return 0;
  detail::FileRing* ring = detail::FileRing::of(*fiber->scheduler);
  return ring == nullptr ? 0 : ring->stats().submitted;
}

// Whether the fiber's calls must have gone through the ring.
enum class Ring { used, unused, either };

template <class Body>
void expect_same_on_thread_and_fiber(Body body, Ring ring) {
  if (const char* why = no_ring_reads(); ring == Ring::used && why != nullptr) GTEST_SKIP() << why;
  const std::string path = make_file();
  std::string on_thread;
  std::thread([&] { on_thread = body(path); }).join();
  std::string on_fiber;
  std::uint64_t requests = 0;
  {
    Scheduler sched{test::config_with(2)};
    sched
        .spawn([&] {
          on_fiber = body(path);
          requests = ring_requests();
        })
        .join();
  }
  ::unlink(path.c_str());
  EXPECT_EQ(on_fiber, on_thread);
  if (ring == Ring::used) {
    EXPECT_GT(requests, 0u) << "nothing went through io_uring";
  } else if (ring == Ring::unused) {
    EXPECT_EQ(requests, 0u);
  }
}

TEST(Files, ReadsGiveWhatAPlainThreadGets) { expect_same_on_thread_and_fiber(reads, Ring::used); }

// fsync, fdatasync and sync_file_range are the calls on the fiber's thread,
// announced (hooks_files.cpp): none goes through the ring.
TEST(Files, SyncsGiveWhatAPlainThreadGets) { expect_same_on_thread_and_fiber(syncs, Ring::unused); }

// The record's count of reads the page cache served whole in a row (0 on
// a plain thread, where the hooks keep none).
unsigned cached_reads(int fd) {
  const detail::FdRecord* record = detail::fd_records().find(fd);
  return record == nullptr ? 0 : record->cached_reads.load();
}

// Once the cache has served an fd's reads whole FdRecord::kTrustCache times
// in a row, its reads are the plain calls (hooks_files.cpp, read_file):
// every form still gives what it gives on a plain thread. The file stays
// cached throughout (written just before, never evicted). A call that
// sysmon judges blocked (a thread held off its CPU on a loaded machine, a
// long copy) may send the fd back to RWF_NOWAIT, whose result is the same:
// the count is checked only before the forms.
std::string reads_of_a_cached_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  char page[4096];
  std::uint64_t sum = 0;
  for (unsigned i = 0; i < detail::FdRecord::kTrustCache; ++i) {
    const ssize_t n = ::pread(fd, page, sizeof page, static_cast<off_t>(i) * 4096);
    sum += checksum(page, n);
  }
  if (detail::current_fiber() != nullptr) {
    EXPECT_EQ(cached_reads(fd), detail::FdRecord::kTrustCache) << "the next reads are not the plain calls";
  }
  return "preads " + std::to_string(sum) + "\n" + read_forms(path, fd, false);
}

TEST(Files, CachedReadsGiveWhatAPlainThreadGets) {
  expect_same_on_thread_and_fiber(reads_of_a_cached_file, Ring::either);
}

// Whether the page at `offset` of the file at `path` is in the page cache
// (mincore of a mapping, which touches nothing).
bool page_cached(const std::string& path, off_t offset) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  void* map = ::mmap(nullptr, kFileSize, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return true;
  std::vector<unsigned char> resident(kFileSize / 4096);
  const bool cached = ::mincore(map, kFileSize, resident.data()) != 0 || (resident[offset / 4096] & 1) != 0;
  ::munmap(map, kFileSize);
  return cached;
}

// A read the cache cannot serve whole, made before the count reached
// kTrustCache, starts the count again: it went to the ring. The page it
// reads is one the reads before it did not bring in (readahead), and it is
// checked to be out of the cache first (POSIX_FADV_DONTNEED is a request:
// a page the kernel holds a reference to for a moment stays). The kernel's
// RWF_NOWAIT read of a page not in the cache starts a readahead, and on a
// fast disk that may be done before the read looks again, which then
// serves the page: such a file proves nothing, and the test takes another
// (one in the Boost.Context build of a CI run did so).
TEST(Files, AReadTheCacheCouldNotServeStartsTheCountAgain) {
  if (const char* why = no_ring_reads()) GTEST_SKIP() << why;
  constexpr off_t kFar = kFileSize / 2;
  constexpr int kFiles = 5;
  std::vector<std::string> paths;  // kept to the end: no inode is reused meanwhile
  Scheduler sched{test::config_with(1)};
  bool proved = false;
  for (int attempt = 0; attempt < kFiles && !proved; ++attempt) {
    const std::string path = paths.emplace_back(make_file());
    sched
        .spawn([&] {
          const int fd = ::open(path.c_str(), O_RDONLY);
          char page[4096];
          for (unsigned i = 0; i + 1 < detail::FdRecord::kTrustCache; ++i)
            ASSERT_EQ(::pread(fd, page, sizeof page, static_cast<off_t>(i) * 4096), 4096);
          EXPECT_EQ(cached_reads(fd), detail::FdRecord::kTrustCache - 1);
          const std::uint64_t before = ring_requests();
          bool evicted = false;
          for (int tries = 0; tries < 50 && !evicted; ++tries) {
            evict(path);
            evicted = !page_cached(path, kFar);
            if (!evicted) this_fiber::sleep_for(std::chrono::milliseconds(10));
          }
          ASSERT_TRUE(evicted) << "the page stayed in the cache: the test proves nothing";
          ASSERT_EQ(::pread(fd, page, sizeof page, kFar), 4096);
          if (cached_reads(fd) == detail::FdRecord::kTrustCache && ring_requests() == before) {
            ::close(fd);  // served by the readahead its own RWF_NOWAIT read started
            return;
          }
          proved = true;
          EXPECT_EQ(cached_reads(fd), 0u);
          EXPECT_GT(ring_requests(), before) << "the uncached read did not go to the ring";
          ::close(fd);
          // The file's count over its fds (hooks/cache_trust.h) started
          // again too: one more read served whole (the page the ring just
          // brought in), through another fd, does not make it kTrustCache,
          // and a new fd starts untrusted.
          const int again = ::open(path.c_str(), O_RDONLY);
          ASSERT_EQ(::pread(again, page, sizeof page, kFar), 4096);
          ::close(again);
          const int next = ::open(path.c_str(), O_RDONLY);
          ASSERT_EQ(::pread(next, page, sizeof page, kFar), 4096);
          EXPECT_EQ(cached_reads(next), 1u) << "the file kept the reads before the uncached one";
          ::close(next);
        })
        .join();
  }
  for (const std::string& path : paths) ::unlink(path.c_str());
  EXPECT_TRUE(proved) << "in " << kFiles << " files, the kernel's own readahead served every uncached read";
}

// The count of reads the cache served whole is kept for the file too,
// across its fds (hooks/cache_trust.h): a file read whole kTrustCache
// times through one fd starts trusted at its next open (its reads are the
// plain calls from the first), and once written again, it starts over.
TEST(Files, AFileTheCacheServedStartsTrustedAtItsNextOpen) {
  const std::string path = make_file();
  Scheduler sched{test::config_with(1)};
  sched
      .spawn([&] {
        char page[4096];
        const int first = ::open(path.c_str(), O_RDONLY);
        for (unsigned i = 0; i < detail::FdRecord::kTrustCache; ++i)
          ASSERT_EQ(::pread(first, page, sizeof page, static_cast<off_t>(i) * 4096), 4096);
        ::close(first);

        const int second = ::open(path.c_str(), O_RDONLY);
        ASSERT_EQ(::pread(second, page, sizeof page, 0), 4096);
        EXPECT_EQ(cached_reads(second), detail::FdRecord::kTrustCache) << "a new fd of the file started over";
        ::close(second);

        // Written since: its change time moved, so it is not the file
        // that was trusted (a coarse clock's tick apart, to be sure).
        this_fiber::sleep_for(std::chrono::milliseconds(20));
        const int writer = ::open(path.c_str(), O_WRONLY);
        ASSERT_EQ(::pwrite(writer, "z", 1, 0), 1);
        ::close(writer);
        const int third = ::open(path.c_str(), O_RDONLY);
        ASSERT_EQ(::pread(third, page, sizeof page, 0), 4096);
        EXPECT_EQ(cached_reads(third), 1u) << "a file written since kept the trust";
        ::close(third);
      })
      .join();
  ::unlink(path.c_str());
}

// Reads that the end of a cached file cuts short are served by the cache,
// not the ring: a read of the last bytes with room for more, a read at
// the end, and read() in 3,000-byte steps to the end (a whole-file read,
// whose last step is short). Each gives what it gives on a plain thread.
std::string reads_to_the_end(const std::string& path) {
  std::ostringstream out;
  const int fd = ::open(path.c_str(), O_RDONLY);
  std::vector<char> buf(4096);
  ssize_t n = ::pread(fd, buf.data(), buf.size(), kFileSize - 100);
  out << "pread last " << n << " " << checksum(buf.data(), n) << "\n";
  n = ::pread(fd, buf.data(), buf.size(), kFileSize);
  out << "pread at end " << n << "\n";
  iovec iov[2] = {{buf.data(), 10}, {buf.data() + 10, 4000}};
  n = ::preadv(fd, iov, 2, kFileSize - 1000);
  out << "preadv last " << n << " " << checksum(buf.data(), n) << "\n";
  std::uint64_t sum = 0;
  ssize_t total = 0;
  int calls = 0;
  while ((n = ::read(fd, buf.data(), 3000)) > 0) {
    sum += checksum(buf.data(), n);
    total += n;
    ++calls;
  }
  out << "read to end " << total << " in " << calls << " sum " << sum << " last " << n << "\n";
  ::close(fd);
  return out.str();
}

TEST(Files, ReadsThatTheEndOfAFileCutsShortStayOffTheRing) {
  expect_same_on_thread_and_fiber(reads_to_the_end, Ring::unused);
}

// A read the cache serves in part, whose rest then fails: the count, with
// errno as it was, as the kernel gives a partial read. The rest's buffer is
// a page the process may not write (EFAULT), so both the RWF_NOWAIT read
// and the ring's read of the rest stop there.
std::string reads_into_a_buffer_cut_short(const std::string& path) {
  std::ostringstream out;
  const int fd = ::open(path.c_str(), O_RDONLY);
  void* pages = ::mmap(nullptr, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(pages, MAP_FAILED);
  EXPECT_EQ(::mprotect(static_cast<char*>(pages) + 4096, 4096, PROT_NONE), 0);
  iovec iov[2] = {{pages, 4096}, {static_cast<char*>(pages) + 4096, 4096}};
  errno = ENOTTY;
  ssize_t n = ::preadv(fd, iov, 2, 8192);
  out << "preadv " << n << " " << checksum(static_cast<char*>(pages), 4096) << " errno " << errno << "\n";
  errno = ENOTTY;
  n = ::pread(fd, static_cast<char*>(pages) + 4096, 4096, 0);
  out << "pread " << n << " errno " << errno << "\n";
  // At the file position, of pages not cached: the position moves by
  // what was read, as a read that stops short moves it. Before, the
  // ring's read at the position left it where it was.
  ::lseek(fd, 16384, SEEK_SET);
  evict(path);
  errno = ENOTTY;
  n = ::read(fd, pages, 2 * 4096);
  out << "read " << n << " errno " << errno << " at " << ::lseek(fd, 0, SEEK_CUR) << "\n";
  ::munmap(pages, 2 * 4096);
  ::close(fd);
  return out.str();
}

TEST(Files, APartialReadKeepsErrno) { expect_same_on_thread_and_fiber(reads_into_a_buffer_cut_short, Ring::used); }

// A read of more than one read moves (MAX_RW_COUNT, just under 2 GiB):
// the count the kernel caps it at, as on a thread, and for read() and
// pread() a range that runs past the process's memory is EFAULT. Before,
// a fiber's readv read on past the cap (the cap looked like a short read),
// and its read() of 2^40 bytes into a small buffer read what the file held.
std::string reads_larger_than_one_read(const std::string& path) {
  std::ostringstream out;
  std::string path_of_sparse = file_template("sparse-");
  const int sparse = ::mkstemp(path_of_sparse.data());
  ::unlink(path_of_sparse.c_str());
  constexpr std::size_t kPiece = 5 << 19;  // 2.5 MiB; 1,024 of them, 2.5 GiB
  EXPECT_EQ(::ftruncate(sparse, off_t(kPiece) * 1024), 0);
  std::vector<char> piece(kPiece);
  std::vector<iovec> iov(1024, iovec{piece.data(), kPiece});  // all into one buffer
  ssize_t n = ::readv(sparse, iov.data(), int(iov.size()));
  out << "readv of 2.5 GiB " << n << " at " << ::lseek(sparse, 0, SEEK_CUR) << "\n";
  ::close(sparse);
  const int fd = ::open(path.c_str(), O_RDONLY);
  char buf[64];
  // Volatile: what the call is asked for, unknown to the compiler, which
  // would refuse a constant it can see runs past the buffer. 2^62 runs
  // past every user address space, so the kernel's range check fails
  // wherever the buffer is. 2^40 did not: with the mmap base randomized
  // by up to 2^40 bytes, a thread's stack sat low enough in about one run
  // in 80 that the kernel took the range and wrote the file over the
  // stack (SIGSEGV in CI).
  const volatile std::size_t huge = std::size_t(1) << 62;
  errno = 0;
  n = ::read(fd, buf, huge);
  out << "read of 2^62 " << n << " errno " << errno << " at " << ::lseek(fd, 0, SEEK_CUR) << "\n";
  errno = 0;
  n = ::pread(fd, buf, huge, 0);
  out << "pread of 2^62 " << n << " errno " << errno << "\n";
  ::close(fd);
  return out.str();
}

TEST(Files, ReadsOfMoreThanOneReadMovesGiveWhatAPlainThreadGets) {
  expect_same_on_thread_and_fiber(reads_larger_than_one_read, Ring::either);
}

// Readers sharing one fd read the file at its position, each read whole
// and apart from the others', as the kernel's read(2) holds the position's
// lock: no part of the file read twice, none missed. The file's pages are
// dropped first, and readahead is off, so that the reads wait for the
// disk. Before, those went to io_uring at the position, which takes no
// such lock: two fibers read the same bytes (most of the file, seen here).
TEST(Files, ReadersSharingAnFdReadEachPartOnce) {
  std::string path = file_template("words-");
  const int fd = ::mkstemp(path.data());
  ::unlink(path.c_str());
  constexpr std::size_t kWords = 1 << 20;  // 4 MiB; each word holds its index
  std::vector<std::uint32_t> words(kWords);
  for (std::size_t i = 0; i < kWords; ++i) words[i] = std::uint32_t(i);
  ASSERT_EQ(::write(fd, words.data(), kWords * 4), ssize_t(kWords * 4));
  ::fsync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  ::lseek(fd, 0, SEEK_SET);
  std::vector<std::atomic<std::uint8_t>> seen(kWords);
  std::atomic<bool> misplaced{false};
  const auto read_to_the_end = [&] {
    std::vector<std::uint32_t> chunk(4096);
    ssize_t n;
    while ((n = ::read(fd, chunk.data(), chunk.size() * 4)) > 0) {
      for (ssize_t i = 0; i < n / 4; ++i) {
        if (chunk[i] >= kWords) {
          misplaced = true;
          continue;
        }
        seen[chunk[i]].fetch_add(1);
      }
    }
  };
  {
    Scheduler sched{test::config_with(2)};
    Fiber first = sched.spawn(read_to_the_end);
    Fiber second = sched.spawn(read_to_the_end);
    first.join();
    second.join();
  }
  ::close(fd);
  std::size_t twice = 0;
  std::size_t missed = 0;
  for (const auto& count : seen) {
    twice += count.load() > 1;
    missed += count.load() == 0;
  }
  EXPECT_FALSE(misplaced.load());
  EXPECT_EQ(twice, 0u) << "words read by both readers";
  EXPECT_EQ(missed, 0u) << "words read by neither";
}

// A read at the file position is one read: read(2) holds the position's
// lock throughout, so an lseek by another thread of the same fd lands
// before or after it, and a read of a 1,000-byte file never returns more.
// Before, a fiber's read was a preadv2(RWF_NOWAIT) and a second one to
// find the end of the file, and the lseek between them made it read the
// file again: more than the file holds in most of the trials. The file is
// written again each trial, so that its reads never reach the count that
// makes them the plain call (FdRecord::kTrustCache).
TEST(Files, AReadAtThePositionIsOneRead) {
  std::string path = file_template("seek-");
  const int made = ::mkstemp(path.data());
  ASSERT_GE(made, 0);
  ::close(made);
  constexpr ssize_t kSize = 1000;
  std::atomic<int> shared_fd{-1};
  std::atomic<bool> done{false};
  std::thread seeker([&] {
    while (!done.load()) {
      if (const int fd = shared_fd.load(); fd >= 0) ::lseek(fd, 0, SEEK_SET);
    }
  });
  ssize_t longest = 0;
  int reads = 0;
  {
    Scheduler sched{test::config_with(1)};
    sched
        .spawn([&] {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
          std::vector<char> buf(8192);
          const std::string data(kSize, 'w');
          for (int trial = 0; trial < 300 && std::chrono::steady_clock::now() < deadline; ++trial) {
            const int fd = ::open(path.c_str(), O_RDWR | O_TRUNC);
            ASSERT_EQ(::write(fd, data.data(), data.size()), kSize);
            ::lseek(fd, 0, SEEK_SET);
            shared_fd = fd;
            for (unsigned i = 0; i + 2 < detail::FdRecord::kTrustCache; ++i, ++reads)
              longest = std::max(longest, ::read(fd, buf.data(), buf.size()));
            shared_fd = -1;
            ::close(fd);
          }
        })
        .join();
  }
  done = true;
  seeker.join();
  ::unlink(path.c_str());
  EXPECT_GT(reads, 100);
  EXPECT_LE(longest, kSize) << "a read returned more than the file holds";
}

// Many fibers reading and syncing at once: every result comes back to its
// own fiber (the ring's lead passes between them).
TEST(Files, ManyFibersShareTheRing) {
  const std::string path = make_file();
  Scheduler sched{test::config_with(2)};
  constexpr int kFibers = 64;
  std::vector<std::uint64_t> got(kFibers);
  std::vector<Fiber> fibers;
  evict(path);
  for (int i = 0; i < kFibers; ++i) {
    fibers.push_back(sched.spawn([&, i] {
      const int fd = ::open(path.c_str(), O_RDWR);
      char buf[8192];
      const ssize_t n = ::pread(fd, buf, sizeof buf, i * 8192);
      got[i] = checksum(buf, n) + static_cast<std::uint64_t>(::fsync(fd));
      ::close(fd);
    }));
  }
  for (auto& fiber : fibers) fiber.join();
  const int fd = ::open(path.c_str(), O_RDONLY);
  for (int i = 0; i < kFibers; ++i) {
    char buf[8192];
    const ssize_t n = ::pread(fd, buf, sizeof buf, i * 8192);
    EXPECT_EQ(got[i], checksum(buf, n)) << "fiber " << i;
  }
  ::close(fd);
  ::unlink(path.c_str());
}

// The ring's set-up, at the first call that wants it, failed for want of
// an fd (EMFILE): it is tried again a second later. Before, the failure
// was final, and the scheduler's uncached reads and fsyncs blocked their
// worker for good after a moment out of fds.
TEST(Files, ARingRefusedForWantOfAnFdIsSetUpLater) {
  if (const char* why = no_ring_reads()) GTEST_SKIP() << why;
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  Scheduler sched{test::config_with(1)};
  bool refused = false;
  bool set_up_later = false;
  sched
      .spawn([&] {
        detail::SchedulerCore& core = *detail::current_fiber()->scheduler;
        const int spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        ASSERT_GE(spare, 0);
        rlimit few = old;
        few.rlim_cur = std::min<rlim_t>(old.rlim_cur, rlim_t(spare) + 64);
        ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &few), 0);
        std::vector<int> filler;
        for (int fd; (fd = ::dup(spare)) >= 0;) filler.push_back(fd);
        refused = detail::FileRing::of(core) == nullptr;
        for (const int fd : filler) ::close(fd);
        ::close(spare);
        ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!(set_up_later = detail::FileRing::of(core) != nullptr) && std::chrono::steady_clock::now() < deadline)
          this_fiber::sleep_for(std::chrono::milliseconds(50));
      })
      .join();
  EXPECT_TRUE(refused) << "the set-up found an fd after all";
  EXPECT_TRUE(set_up_later) << "the ring was never set up once fds were free";
}

// In a child whose io_uring_setup fails with ENOSYS (a seccomp filter, as
// a container's profile would install), the calls are libc's.
TEST(Files, WithoutIoUringTheCallsAreLibcs) {
  int status = -1;
  const std::string out = test::run_child("no-uring", "", "FilesChild.WithoutIoUring", status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
}

TEST(FilesChild, WithoutIoUring) {
  if (!test::child_mode("no-uring")) GTEST_SKIP() << "runs in the child of Files.WithoutIoUringTheCallsAreLibcs";
  ASSERT_TRUE(test::refuse_syscalls({__NR_io_uring_setup}, ENOSYS));
  expect_same_on_thread_and_fiber(reads, Ring::unused);
  expect_same_on_thread_and_fiber(syncs, Ring::unused);
}

}  // namespace
}  // namespace weft
