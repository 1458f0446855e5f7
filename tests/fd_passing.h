// Passing fds over unix sockets (SCM_RIGHTS), for the tests: a message
// with room for one fd, sent or received.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstring>

namespace weft::test {

// A message of one buffer, with a control buffer that holds one fd.
struct MessageWithFd {
  iovec iov{};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  MessageWithFd(void* data, std::size_t n) : iov{data, n} {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  MessageWithFd(const MessageWithFd&) = delete;
  MessageWithFd& operator=(const MessageWithFd&) = delete;

  // Puts `fd` in the control buffer, to be sent.
  void carry(int fd) {
    cmsghdr* header = CMSG_FIRSTHDR(&msg);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof fd);
  }

  // The fd a receive put in the control buffer, or -1.
  int carried() const {
    for (const cmsghdr* h = CMSG_FIRSTHDR(&msg); h != nullptr;
         h = CMSG_NXTHDR(const_cast<msghdr*>(&msg), const_cast<cmsghdr*>(h))) {
      if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(h), sizeof fd);
      return fd;
    }
    return -1;
  }
};

// Sends `n` bytes of `data` carrying `fd` on `socket`; sendmsg's result.
inline ssize_t send_with_fd(int socket, const void* data, std::size_t n, int fd) {
  MessageWithFd message(const_cast<void*>(data), n);
  message.carry(fd);
  return ::sendmsg(socket, &message.msg, 0);
}

}  // namespace weft::test
