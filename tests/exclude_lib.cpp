// A stand-in for a library that must not park (tests/hooks_exclude_test.cpp):
// built three times from this file, as libweft_test_excluded.so, which the
// test lists in WEFT_HOOKS_EXCLUDE, as libweft_test_locks_excluded.so,
// which it lists in WEFT_HOOK_LOCKS_EXCLUDE, and as libweft_test_parked.so,
// which it lists in neither. Built with _FORTIFY_SOURCE=2: fortified_read reaches the hooks
// through __read_chk.
//
// Each function keeps the call's errno after it, as real libraries do: a
// function that ended in its libc call would make it a tail call, which
// returns to the library's caller and so is the caller's call (docs/io.md).
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace {
thread_local int last_error = 0;
}

extern "C" {

int library_last_error() { return last_error; }

ssize_t library_read(int fd, void* buffer, size_t size) {
  const ssize_t n = read(fd, buffer, size);
  last_error = errno;
  return n;
}

ssize_t fortified_read(int fd, void* buffer, size_t size) {
  char local[64];
  const ssize_t n = read(fd, local, size);  // a known buffer: __read_chk
  last_error = errno;
  if (n > 0) std::memcpy(buffer, local, static_cast<size_t>(n));
  return n;
}

int library_accept(int listener) {
  const int fd = accept(listener, nullptr, nullptr);
  last_error = errno;
  return fd;
}

int library_lock(pthread_mutex_t* mutex) {
  const int error = pthread_mutex_lock(mutex);
  last_error = error;
  return error;
}

int wait_readable(int fd, int timeout_ms) {
  pollfd fds[1] = {{fd, POLLIN, 0}};
  const int ready = poll(fds, 1, timeout_ms);
  last_error = errno;
  return ready;
}

}  // extern "C"
