// Whether the kernel can read memory a caller passed to a hooked call.
//
// A hook that reads an argument before libc's call would (select's fd sets,
// nanosleep's request, the fds a sendmsg carries) must not die of SIGSEGV
// where the call itself fails with EFAULT: memory freed, unmapped, or with
// no access. Asked cheaply: memory on the calling stack, a fiber's or a
// thread's, between the hook's frame and the stack's top, is live (the
// usual `fd_set r;`, `timespec t;`, `msghdr m;`); any other is asked of
// the kernel, one system call per page. No lock; a plain thread's stack is
// looked up at its first use, which allocates (pthread_getattr_np), never
// from a signal handler the hooks' trampolines count.
#pragma once

#include <cstddef>

namespace weft::detail {

bool readable_by_kernel(const void* from, std::size_t bytes) noexcept;

// The first half of readable_by_kernel: whether [from, from + bytes) lies
// on the calling stack, a fiber's or a thread's, between the caller's
// frame and the stack's top. No system call.
bool on_live_stack(const void* from, std::size_t bytes) noexcept;

template <class T>
bool readable_by_kernel(const T* object) noexcept {
  return readable_by_kernel(object, sizeof(T));
}

// readable_by_kernel for the pieces of one structure read in turn (a
// message's header, its control headers and their fds): a piece that lies
// in the last page found readable is not asked again.
class PiecesReadable {
 public:
  bool operator()(const void* from, std::size_t bytes) noexcept;
  template <class T>
  bool operator()(const T* object) noexcept {
    return (*this)(object, sizeof(T));
  }

 private:
  const char* known_page_ = nullptr;  // null: none yet
};

}  // namespace weft::detail
