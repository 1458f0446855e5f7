#include "own_control_steps.h"

#include <sys/stat.h>

#include <cstring>

#include "real_calls.h"

namespace weft::detail {
namespace {

// SO_PASSPIDFD's message (Linux 6.5): the sender's pidfd, an fd the
// kernel installs only where the receive has room for it.
constexpr int kScmPidfd = 0x04;  // SCM_PIDFD

// Closes the fds a control message carries, which the caller's call, with
// no room for them, would never have had.
void close_fds_in(const cmsghdr& message) noexcept {
  const std::size_t fds = (message.cmsg_len - CMSG_LEN(0)) / sizeof(int);
  for (std::size_t i = 0; i < fds; ++i) {
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(&message) + i * sizeof(int), sizeof fd);
    real::close()(fd);
  }
}

}  // namespace

ssize_t OwnControlSteps::receive(int fd, iovec* iov, std::size_t count, int flags, msghdr* name) noexcept {
  msghdr msg{};
  if (name != nullptr) {
    msg.msg_name = name->msg_name;
    msg.msg_namelen = name->msg_namelen;
  }
  msg.msg_iov = iov;
  msg.msg_iovlen = count;
  msg.msg_control = control_;
  msg.msg_controllen = sizeof control_;
  const ssize_t received = real::recvmsg()(fd, &msg, flags | MSG_CMSG_CLOEXEC);
  if (received < 0) return received;
  if (name != nullptr) {
    name->msg_namelen = msg.msg_namelen;
    // The kernel echoes MSG_CMSG_CLOEXEC: the caller's, not this one's.
    name->msg_flags = (msg.msg_flags & ~(MSG_CTRUNC | MSG_CMSG_CLOEXEC)) | (flags & MSG_CMSG_CLOEXEC);
  }
  const Sender sender = take_control(msg);
  if (name != nullptr) sender_ = sender;
  return received;
}

OwnControlSteps::Sender OwnControlSteps::take_control(msghdr& msg) noexcept {
  Sender sender;
  // Fds that did not fit here either were closed by the kernel (MSG_CTRUNC):
  // the kernel's receive stops after them just the same.
  if (msg.msg_flags & MSG_CTRUNC) passed_fds_ = truncated_ = true;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    truncated_ = true;
    if (c->cmsg_level != SOL_SOCKET) continue;
    if (c->cmsg_type == SCM_RIGHTS) passed_fds_ = true;
    if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
      std::memcpy(&sender.creds, CMSG_DATA(c), sizeof(ucred));
      sender.have_creds = true;
    }
    if (c->cmsg_type == kScmPidfd && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int pidfd = -1;
      std::memcpy(&pidfd, CMSG_DATA(c), sizeof pidfd);
      struct stat st {};
      if (::fstat(pidfd, &st) == 0) sender.pidfd_inode = st.st_ino;
    }
    if (c->cmsg_type == SCM_RIGHTS || c->cmsg_type == kScmPidfd) close_fds_in(*c);
  }
  return sender;
}

bool OwnControlSteps::Sender::differs_from(const Sender& other) const noexcept {
  if (have_creds && other.have_creds &&
      (creds.pid != other.creds.pid || creds.uid != other.creds.uid || creds.gid != other.creds.gid))
    return true;
  return pidfd_inode != 0 && other.pidfd_inode != 0 && pidfd_inode != other.pidfd_inode;
}

bool OwnControlSteps::stops_here(int fd) noexcept {
  if (passed_fds_) return true;
  if (!sender_.have_creds && sender_.pidfd_inode == 0) return false;
  // A peek of one byte: its control data says whose the next segment is
  // (and carries duplicates of its fds, closed).
  char byte;
  iovec one{&byte, 1};
  msghdr msg{};
  msg.msg_iov = &one;
  msg.msg_iovlen = 1;
  msg.msg_control = control_;
  msg.msg_controllen = sizeof control_;
  if (real::recvmsg()(fd, &msg, MSG_PEEK | MSG_DONTWAIT | MSG_CMSG_CLOEXEC) <= 0) return false;
  const bool fds_before = passed_fds_;
  const bool truncated_before = truncated_;
  const Sender next = take_control(msg);
  passed_fds_ = fds_before;  // a peek's: the step itself will say
  truncated_ = truncated_before;
  return next.differs_from(sender_);
}

}  // namespace weft::detail
