// glibc's layout of pthread_mutex_t, pthread_cond_t and pthread_rwlock_t,
// as the lock hooks use it (hooks/locks.h): the fields glibc's initializers
// and pthread_*_init() write (a mutex's kind, a condition variable's clock
// and process-shared bits, an rwlock's preference and process-shared flag),
// which the hooks read to tell what they may take over, and the fields the
// hooks keep their own state in. Values from glibc 2.36's nptl
// (sysdeps/nptl/pthreadP.h, nptl/pthread_cond_init.c,
// nptl/pthread_rwlock_init.c; unchanged since 2.34, when libpthread moved
// into libc), for x86-64, whose layouts these asserts check (elsewhere the
// lock hooks are not built: hooks/meson.build).
//
// Every field is reached through std::atomic_ref: the hooks' own state is
// atomic, and the owner fields are read by callers that do not own the
// object (an error-checking mutex's "do I own it?"), which glibc does with
// plain loads, and a sanitizer would call a race. The condition variable's
// word is the exception (CondWord, below).
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tsan.h"

namespace weft::detail::pthread_layout {

#if !defined(__x86_64__) || !defined(__GLIBC__)
#error "the lock hooks know glibc's x86-64 layouts only"
#endif

// --- pthread_mutex_t ------------------------------------------------------
// __kind: the type in the low two bits (PTHREAD_MUTEX_NORMAL/TIMED_NP 0,
// RECURSIVE 1, ERRORCHECK 2, ADAPTIVE_NP 3), flags above them. -1 after
// pthread_mutex_destroy().
constexpr int kMutexTypeMask = 3;
constexpr int kMutexRobust = 16;          // PTHREAD_MUTEX_ROBUST_NORMAL_NP
constexpr int kMutexPrioInherit = 32;     // PTHREAD_MUTEX_PRIO_INHERIT_NP
constexpr int kMutexPrioProtect = 64;     // PTHREAD_MUTEX_PRIO_PROTECT_NP
constexpr int kMutexPshared = 128;        // PTHREAD_MUTEX_PSHARED_BIT
constexpr int kMutexElision = 256 | 512;  // PTHREAD_MUTEX_ELISION_NP, _NO_ELISION_NP: a hint, ignored
constexpr int kMutexTakenOverMask = ~(kMutexTypeMask | kMutexElision);

inline int mutex_kind(const pthread_mutex_t* m) noexcept {
  return std::atomic_ref(const_cast<int&>(m->__data.__kind)).load(std::memory_order_relaxed);
}
// The lock word: glibc's lll lock (0 free, 1 locked, 2 locked with sleepers)
// in its low two bits, the hooks' bits above (hooks/hooks_mutex.cpp).
inline std::atomic_ref<int> mutex_word(pthread_mutex_t* m) noexcept { return std::atomic_ref(m->__data.__lock); }
// The owner: __owner, glibc's, and __list.__prev, unused by glibc unless the
// mutex is robust (which the hooks pass through), for the owning fiber's
// control block (hooks/locks.h, Ownership).
inline std::atomic_ref<int> mutex_owner_tag(pthread_mutex_t* m) noexcept { return std::atomic_ref(m->__data.__owner); }
inline std::atomic_ref<__pthread_internal_list*> mutex_owner_fiber(pthread_mutex_t* m) noexcept {
  return std::atomic_ref(m->__data.__list.__prev);
}
static_assert(offsetof(pthread_mutex_t, __data.__lock) == 0);
static_assert(offsetof(pthread_mutex_t, __data.__owner) == 8);
static_assert(offsetof(pthread_mutex_t, __data.__kind) == 16);
static_assert(offsetof(pthread_mutex_t, __data.__list.__prev) == 24);

// --- pthread_cond_t -------------------------------------------------------
// __wrefs: bit 0 process-shared, bit 1 CLOCK_MONOTONIC (else REALTIME);
// glibc's own waiter references above them, which the hooks never use, so
// glibc's pthread_cond_destroy() finds none and returns at once.
constexpr unsigned kCondPshared = 1;         // __PTHREAD_COND_SHARED_MASK
constexpr unsigned kCondClockMonotonic = 2;  // __PTHREAD_COND_CLOCK_MONOTONIC_MASK

inline unsigned cond_flags(const pthread_cond_t* c) noexcept {
  return std::atomic_ref(const_cast<unsigned&>(c->__data.__wrefs)).load(std::memory_order_relaxed);
}
// The hooks' word: the low half of glibc's waiter sequence, zero in every
// initializer (hooks/hooks_condvar.cpp), read and written relaxed.
//
// ThreadSanitizer's interceptors of pthread_cond_wait, _signal and
// _broadcast read a condition variable's first eight bytes as plain memory
// before they call the next definition, libweft's: glibc, not
// instrumented, writes them unseen. Seen, the hooks' atomic writes there
// would be a race with that read in every other thread's call. So, in a
// TSan build, the word is reached out of line and uninstrumented, as
// glibc's code reaches it; it carries no data between threads (the parking
// lot's bucket lock and the mutex do, and TSan sees both).
class CondWord {
 public:
  explicit CondWord(pthread_cond_t* c) noexcept : word_(&c->__data.__wseq.__value32.__low) {}
  WEFT_UNSEEN_BY_TSAN unsigned load() const noexcept { return __atomic_load_n(word_, __ATOMIC_RELAXED); }
  WEFT_UNSEEN_BY_TSAN void set(unsigned bits) const noexcept { __atomic_fetch_or(word_, bits, __ATOMIC_RELAXED); }
  WEFT_UNSEEN_BY_TSAN void clear(unsigned bits) const noexcept { __atomic_fetch_and(word_, ~bits, __ATOMIC_RELAXED); }

 private:
  unsigned* word_;
};
inline CondWord cond_word(pthread_cond_t* c) noexcept { return CondWord(c); }
static_assert(offsetof(pthread_cond_t, __data.__wseq) == 0);

// --- pthread_rwlock_t -----------------------------------------------------
constexpr unsigned kRwlockPreferWriterNonrecursive = 2;  // PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP

inline unsigned rwlock_preference(const pthread_rwlock_t* l) noexcept {
  return std::atomic_ref(const_cast<unsigned&>(l->__data.__flags)).load(std::memory_order_relaxed);
}
inline bool rwlock_pshared(const pthread_rwlock_t* l) noexcept {
  return std::atomic_ref(const_cast<int&>(l->__data.__shared)).load(std::memory_order_relaxed) != 0;
}
// The hooks' state word (hooks/hooks_rwlock.cpp) in glibc's __readers.
inline std::atomic_ref<unsigned> rwlock_word(pthread_rwlock_t* l) noexcept {
  return std::atomic_ref(l->__data.__readers);
}
// The writer: __cur_writer, as a mutex's __owner, and glibc's unused __pad2
// for the writing fiber's control block.
inline std::atomic_ref<int> rwlock_writer_tag(pthread_rwlock_t* l) noexcept {
  return std::atomic_ref(l->__data.__cur_writer);
}
inline std::atomic_ref<unsigned long> rwlock_writer_fiber(pthread_rwlock_t* l) noexcept {
  return std::atomic_ref(l->__data.__pad2);
}
static_assert(offsetof(pthread_rwlock_t, __data.__readers) == 0);

}  // namespace weft::detail::pthread_layout
