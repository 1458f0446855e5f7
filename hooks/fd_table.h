// The user's view of each file descriptor, as the libc hooks keep it in
// the fd's one record (io/fd_records.h, beside the netpoller's wait state):
// what kind of fd it is, whether the *user* asked for O_NONBLOCK, and its
// SO_RCVTIMEO, SO_SNDTIMEO and SO_RCVLOWAT. Kept up to date by the state
// hooks (socket, accept, pipe, dup, fcntl, ioctl(FIONBIO), setsockopt,
// close) on every thread, before any scheduler exists too, so that an fd
// created on a plain thread is known when a fiber uses it.
//
// An fd weft did not see created (inherited, opened by open(), made inside
// libc) is classified on its first use from a fiber, or when it is added
// to an epoll (fd_added_to_epoll), with fstat, F_GETFL and getsockopt;
// after that its record is as good as any other.
#pragma once

#include <sys/stat.h>

#include <cstdint>

#include "../io/fd_records.h"
#include "../io/netpoller.h"
#include "description_sharing.h"

namespace weft::detail {

// The record of `fd`, allocating its chunk on first touch; null for a
// negative fd or one beyond the table (2^25), and if memory runs out (the
// hooks then pass the call through).
inline FdRecord* fd_state(int fd) noexcept { return fd_records().get(fd); }

// Whether an fd of this mode (fstat's st_mode) is one epoll refuses: a
// regular file, a directory, a block device (FdKind::unpollable).
inline bool epoll_refuses(mode_t mode) noexcept { return S_ISREG(mode) || S_ISDIR(mode) || S_ISBLK(mode); }

// fd_state(), classified if it was unknown (a fiber is about to use it).
FdRecord* classified_fd_state(int fd) noexcept;

// Whether a fiber parks on fds of this kind: sockets, and pipes, FIFOs,
// terminals and anonymous inodes (eventfd, timerfd, signalfd). Their calls
// may wait for another party to act, where a file's end by themselves.
inline bool pollable_kind(FdKind kind) noexcept { return kind == FdKind::socket || kind == FdKind::pollable; }

// Whether what a poll of this fd reports depends on the thread that asks,
// so that only the caller's own call sees it: a regular file, directory
// or block device (FdKind::unpollable; the files of procfs, sysfs and
// cgroupfs with a poll of their own report an event once, to the first
// poll that asks), a signalfd (readable for the signals pending on the
// polling thread beside the process's), and an epoll that holds one of
// these (FdRecord::holds_callers_readiness_bit). A fiber's wait on one is
// the call itself on its own thread (hooks_multiplexers.cpp), never a park
// on the netpoller, whose thread would ask instead.
inline bool readiness_is_the_callers(const FdRecord& record) noexcept {
  return record.kind() == FdKind::unpollable || record.signalfd() || record.holds_callers_readiness();
}

// After epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd) succeeded: marks epoll_fd
// if `fd`'s readiness is the caller's (readiness_is_the_callers).
void fd_added_to_epoll(int epoll_fd, int fd) noexcept;

// The record a change to `fd`'s description or socket (O_NONBLOCK, a
// timeout) goes into: fd_state(fd), or in a vfork child (whose fd is its
// own, the records its parent's) the parent's record of a description the
// two share, never one it would have to make; else null.
FdRecord* settable_fd_state(int fd) noexcept;

// A new fd the hooks saw created, with a new open file description made by
// this process, `birth` read before the call that made it
// (hooks/description_sharing.h). `socket_bits`: a socket's socket_bits().
void fd_created(int fd, FdKind kind, bool user_nonblock, const DescriptionBirth& birth,
                std::uint32_t socket_bits = 0) noexcept;

// The record's bits that a socket's domain, type (flags aside) and
// protocol give it: FdRecord::stream_bit, short_read_drains_bit.
std::uint32_t socket_bits(int domain, int type, int protocol) noexcept;

// What socket_timeout_ns returns for a timeout the kernel takes as "at
// once": a call that finds nothing to do fails with EAGAIN instead of
// waiting (a deadline of now, deadline_after_ns).
inline constexpr std::int64_t kTimeoutAtOnce = -1;

// The socket's SO_RCVTIMEO (read) or SO_SNDTIMEO (write) in nanoseconds,
// 0 for none and for an fd that is not a socket, kTimeoutAtOnce for a
// negative one. The timeout belongs to the socket, which dup, fork and
// SCM_RIGHTS share, not to this fd number: it is read from the socket
// (getsockopt) and cached in the record until a cached option is set
// through any fd of the process (socket_option_set).
//
// The kernel keeps a negative timeout as "at once" but getsockopt reports
// it as {0, 0}, as it reports none; so the setsockopt that set it marks
// the fd's record (FdRecord::recv_timeout_at_once_bit), which dup and
// accept pass on as the kernel does, and a later setsockopt of the option
// through the fd clears. Not seen: a negative timeout set through another
// fd of the socket after this one was made (another dup, a number received
// with SCM_RIGHTS, another process) or with a raw system call, nor a
// timeout of none set that way over one this fd set negative.
std::int64_t socket_timeout_ns(int fd, FdRecord& record, FdDirection direction) noexcept;

// The socket's SO_RCVLOWAT, cached as its timeouts are; 1 (the kernel's
// default) for an fd that is not a socket, and without a system call
// while no SO_RCVLOWAT was set in this process (through the hook: one set
// before exec, or by another process on a shared socket, is not seen).
int socket_rcvlowat(int fd, FdRecord& record) noexcept;

// After a setsockopt(fd, level, option, value) that succeeded: the
// options the records cache (SO_RCVTIMEO, SO_SNDTIMEO, SO_RCVLOWAT) are
// stale in every record (the socket may be shared by other fds), and a
// timeout's "at once" is noted on `fd`'s (socket_timeout_ns).
void socket_option_set(int fd, int level, int option, const void* value) noexcept;

// `to` now refers to the same open file description as `from` (dup).
void fd_duplicated(int from, int to) noexcept;

// `fd` is being closed, or its number was reused where no hook saw the
// old one close: its record goes back to unknown, with a new generation.
void fd_forgotten(int fd) noexcept;

// In a signal handler, where no lock may be taken (the code it interrupted
// may hold the record's): `fd` was closed, or a new fd took its number. The
// record is marked (FdRecord::changed_in_handler), and renewed at its next
// use outside a handler (fd_renew_if_changed). fd_created, fd_duplicated
// and fd_forgotten call it themselves in a handler.
void fd_changed_in_handler(int fd) noexcept;

// The user's view only, back to unknown (what fd_forgotten does besides
// renewing the netpoller's state).
void fd_description_reset(FdRecord& record) noexcept;

}  // namespace weft::detail
