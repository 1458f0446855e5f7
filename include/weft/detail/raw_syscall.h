// raw_syscall: a system call made with the instruction itself, not through
// libc's syscall(), which libweft interposes (hooks/hooks_futex.cpp: a
// futex wait in a fiber parks it). Inside libweft every call to a function
// it defines binds to that definition (-Bsymbolic-functions), so its own
// layers reach the kernel through this (runtime/system_calls.h), never
// through a name the hooks define (scripts/check-layers).
//
// Returns the kernel's result: -errno on failure, errno itself untouched.
// Up to six arguments, each converted to long; on an architecture without
// the instruction here, libc's syscall() (whose errno it puts back).
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <type_traits>

namespace weft::detail {

template <class T>
inline long syscall_argument(T value) noexcept {
  if constexpr (std::is_pointer_v<T> || std::is_null_pointer_v<T>)
    return reinterpret_cast<long>(value);
  else
    return static_cast<long>(value);
}

inline long raw_syscall6(long number, long a1, long a2, long a3, long a4, long a5, long a6) noexcept {
#if defined(__x86_64__)
  long result;
  register long r10 asm("r10") = a4;
  register long r8 asm("r8") = a5;
  register long r9 asm("r9") = a6;
  asm volatile("syscall"
               : "=a"(result)
               : "0"(number), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  return result;
#elif defined(__aarch64__)
  register long x8 asm("x8") = number;
  register long x0 asm("x0") = a1;
  register long x1 asm("x1") = a2;
  register long x2 asm("x2") = a3;
  register long x3 asm("x3") = a4;
  register long x4 asm("x4") = a5;
  register long x5 asm("x5") = a6;
  asm volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
  return x0;
#else
  const int saved = errno;
  const long result = ::syscall(number, a1, a2, a3, a4, a5, a6);
  const long error = errno;
  errno = saved;
  return result == -1 ? -error : result;
#endif
}

template <class... Args>
inline long raw_syscall(long number, Args... args) noexcept {
  static_assert(sizeof...(Args) <= 6, "a system call takes at most six arguments");
  long a[6] = {syscall_argument(args)...};
  return raw_syscall6(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

}  // namespace weft::detail
