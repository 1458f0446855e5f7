#include "own_control_steps.h"

#include <cstring>

#include "real_calls.h"

namespace weft::detail {

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
    name->msg_flags = msg.msg_flags & ~MSG_CTRUNC;
  }
  // Fds that did not fit here either were closed by the kernel (MSG_CTRUNC):
  // the kernel's receive stops after them just the same.
  if (msg.msg_flags & MSG_CTRUNC) passed_fds_ = truncated_ = true;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    truncated_ = true;
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    passed_fds_ = true;
    const std::size_t fds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < fds; ++i) {
      int passed = -1;
      std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof passed);
      real::close()(passed);
    }
  }
  return received;
}

}  // namespace weft::detail
