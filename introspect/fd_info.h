// What an fd of this process is, in a few words, for weft-dump's line of a
// fiber parked on it: "127.0.0.1:41234 -> 127.0.0.1:6379" for a connected
// socket, "listening 127.0.0.1:8080", "pipe", "eventfd", "file /var/log/x"...
#pragma once

#include <string>

namespace weft::detail {

// Read at the time of the call (getsockname/getpeername, fstat, /proc);
// "closed" if the fd is not open.
std::string describe_fd(int fd);

}  // namespace weft::detail
