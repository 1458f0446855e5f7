// Regular-file reads from a fiber that park instead of blocking the worker
// when the page cache cannot serve them (hooks_files.cpp): shared by the
// read hooks of hooks_io_calls.cpp (read, readv) and hooks_files.cpp
// (pread, preadv and their 64-bit and fortified names).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

namespace weft::detail {

struct FdRecord;

// `record` (classified_fd_state's) if its fd is a file epoll cannot watch
// (a regular file, a directory, a block device, a device that refused
// epoll); else null.
FdRecord* unpollable_file(FdRecord* record) noexcept;
// The same for `fd`, classifying it if the hooks have not yet.
FdRecord* unpollable_file(int fd) noexcept;

// preadv(fd, iov, count, offset) from a fiber, `file` being
// unpollable_file(fd); offset -1 reads at the file position and advances
// it, as read() does. Libc's result and errno.
ssize_t read_file(FdRecord& file, int fd, const iovec* iov, int count, off_t offset);

// read_file of one buffer: read() (offset -1) and pread().
ssize_t read_file(FdRecord& file, int fd, void* buf, size_t n, off_t offset);

}  // namespace weft::detail
