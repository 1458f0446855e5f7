// iovec arrays: their length, and the part a partial transfer left (what a
// hook that finishes a short write, sendmsg_all, or a partly cached read,
// read_file, passes to its next call).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <vector>

namespace weft::detail {

// The bytes `iov`'s `count` entries hold.
inline std::size_t iov_total(const iovec* iov, int count) {
  std::size_t total = 0;
  for (int i = 0; i < count; ++i) total += iov[i].iov_len;
  return total;
}

// `iov` less its first `bytes` bytes: whole entries dropped, the next one
// advanced.
inline void drop_front(std::vector<iovec>& iov, std::size_t bytes) {
  auto first = iov.begin();
  while (first != iov.end() && bytes >= first->iov_len) bytes -= (first++)->iov_len;
  iov.erase(iov.begin(), first);
  if (!iov.empty()) {
    iov.front().iov_base = static_cast<char*>(iov.front().iov_base) + bytes;
    iov.front().iov_len -= bytes;
  }
}

// `rest` set to `iov`'s `count` entries less their first `bytes` bytes:
// what a transfer that moved `bytes` of them has left to move.
inline void iovecs_after(const iovec* iov, std::size_t count, std::size_t bytes, std::vector<iovec>& rest) {
  rest.assign(iov, iov + count);
  drop_front(rest, bytes);
}

}  // namespace weft::detail
