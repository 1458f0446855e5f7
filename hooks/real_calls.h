// The real libc functions behind weft's hooks (hooks/hooks_*.cpp).
//
// Each is resolved when libweft is loaded, and on its first use if that
// comes earlier: a hook can run before any constructor (a static
// initialiser that writes, a preloaded library). Not only at first use: a
// first use may be in a signal handler (a SIGCHLD reaper's first waitpid),
// where dlsym, which takes the loader's lock and may allocate, is not
// safe. Resolution asks
// dlsym(RTLD_NEXT) first, so that a sanitizer runtime or another
// interposer that comes after libweft in the search order keeps working;
// when that finds nothing (libweft itself dlopen'ed after libc) it asks
// libc.so.6 directly; when neither has it (a static link, a runtime that
// hides it) a call with a system call beneath it falls back to making that
// call directly (syscall(SYS_...)), and the others abort naming the
// symbol. Two threads resolving the same symbol at once store
// the same pointer, so the slot needs no lock: it is its own once-guard.
//
// errno_value()/set_errno() read and write errno through calls the
// compiler cannot see into. __errno_location() is declared const, so in
// one function the compiler may compute errno's address once and reuse it
// after a park that resumed the fiber on another worker (another thread,
// another errno). Every hook sets errno through these after it may have
// parked.
#pragma once

#include <dirent.h>
#include <mqueue.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

// <resolv.h>'s state, declared here rather than included: that header
// brings <arpa/nameser.h>'s macros (NOERROR, QUERY, T_A...) into every hook.
struct __res_state;

namespace weft::detail::real {

// The address of `name` in the next object after libweft that defines it,
// else its direct system call; aborts with a message naming it if neither
// exists.
void* resolve(const char* name) noexcept;

// The function making `name`'s system call directly, or null for a call
// with none beneath it (sleep, usleep, the resolver).
void* raw_syscall_fallback(const char* name) noexcept;

// What resolve() does with what dlsym `found` for `name`: that, else the
// direct system call, else abort with a message naming `name`.
void* resolved_or_fallback(const char* name, void* found) noexcept;

template <class Fn>
inline Fn* load(std::atomic<void*>& slot, const char* name) noexcept {
  void* fn = slot.load(std::memory_order_relaxed);
  if (__builtin_expect(fn == nullptr, 0)) {
    fn = resolve(name);
    slot.store(fn, std::memory_order_relaxed);
  }
  return reinterpret_cast<Fn*>(fn);
}

// Fills `slot` with `name`'s function when libweft is loaded, unless a
// hook did first. One that no object defines and no system call stands
// for is left to its first use, which aborts naming it (resolve()): a
// program that never calls it must still run.
struct ResolvedAtLoad {
  ResolvedAtLoad(std::atomic<void*>& slot, const char* name) noexcept;
};

// real::read()(fd, buf, n) calls libc's read.
#define WEFT_REAL_CALL(name, ...)                                  \
  inline std::atomic<void*> slot_##name{nullptr};                  \
  inline const ResolvedAtLoad resolved_##name{slot_##name, #name}; \
  inline auto name() noexcept { return load<__VA_ARGS__>(slot_##name, #name); }

WEFT_REAL_CALL(read, ssize_t(int, void*, size_t))
WEFT_REAL_CALL(readv, ssize_t(int, const iovec*, int))
WEFT_REAL_CALL(write, ssize_t(int, const void*, size_t))
WEFT_REAL_CALL(writev, ssize_t(int, const iovec*, int))
WEFT_REAL_CALL(recv, ssize_t(int, void*, size_t, int))
WEFT_REAL_CALL(recvfrom, ssize_t(int, void*, size_t, int, sockaddr*, socklen_t*))
WEFT_REAL_CALL(recvmsg, ssize_t(int, msghdr*, int))
WEFT_REAL_CALL(recvmmsg, int(int, mmsghdr*, unsigned int, int, timespec*))
WEFT_REAL_CALL(send, ssize_t(int, const void*, size_t, int))
WEFT_REAL_CALL(sendto, ssize_t(int, const void*, size_t, int, const sockaddr*, socklen_t))
WEFT_REAL_CALL(sendmsg, ssize_t(int, const msghdr*, int))
WEFT_REAL_CALL(sendmmsg, int(int, mmsghdr*, unsigned int, int))
WEFT_REAL_CALL(connect, int(int, const sockaddr*, socklen_t))
WEFT_REAL_CALL(accept, int(int, sockaddr*, socklen_t*))
WEFT_REAL_CALL(accept4, int(int, sockaddr*, socklen_t*, int))
WEFT_REAL_CALL(poll, int(pollfd*, nfds_t, int))
WEFT_REAL_CALL(ppoll, int(pollfd*, nfds_t, const timespec*, const sigset_t*))
WEFT_REAL_CALL(select, int(int, fd_set*, fd_set*, fd_set*, timeval*))
WEFT_REAL_CALL(pselect, int(int, fd_set*, fd_set*, fd_set*, const timespec*, const sigset_t*))
WEFT_REAL_CALL(epoll_wait, int(int, epoll_event*, int, int))
WEFT_REAL_CALL(epoll_pwait, int(int, epoll_event*, int, int, const sigset_t*))
WEFT_REAL_CALL(epoll_pwait2, int(int, epoll_event*, int, const timespec*, const sigset_t*))
WEFT_REAL_CALL(sleep, unsigned int(unsigned int))
WEFT_REAL_CALL(usleep, int(useconds_t))
WEFT_REAL_CALL(nanosleep, int(const timespec*, timespec*))
WEFT_REAL_CALL(clock_nanosleep, int(clockid_t, int, const timespec*, timespec*))
WEFT_REAL_CALL(getaddrinfo, int(const char*, const char*, const addrinfo*, addrinfo**))
WEFT_REAL_CALL(getnameinfo, int(const sockaddr*, socklen_t, char*, socklen_t, char*, socklen_t, int))
WEFT_REAL_CALL(gethostbyname, hostent*(const char*))
WEFT_REAL_CALL(gethostbyname2, hostent*(const char*, int))
WEFT_REAL_CALL(gethostbyaddr, hostent*(const void*, socklen_t, int))
WEFT_REAL_CALL(gethostbyname_r, int(const char*, hostent*, char*, size_t, hostent**, int*))
WEFT_REAL_CALL(gethostbyname2_r, int(const char*, int, hostent*, char*, size_t, hostent**, int*))
WEFT_REAL_CALL(gethostbyaddr_r, int(const void*, socklen_t, int, hostent*, char*, size_t, hostent**, int*))
WEFT_REAL_CALL(socket, int(int, int, int))
WEFT_REAL_CALL(socketpair, int(int, int, int, int*))
WEFT_REAL_CALL(pipe, int(int*))
WEFT_REAL_CALL(pipe2, int(int*, int))
WEFT_REAL_CALL(dup, int(int))
WEFT_REAL_CALL(dup2, int(int, int))
WEFT_REAL_CALL(dup3, int(int, int, int))
WEFT_REAL_CALL(fcntl, int(int, int, ...))
WEFT_REAL_CALL(fcntl64, int(int, int, ...))
WEFT_REAL_CALL(ioctl, int(int, unsigned long, ...))
WEFT_REAL_CALL(setsockopt, int(int, int, int, const void*, socklen_t))
WEFT_REAL_CALL(getsockopt, int(int, int, int, void*, socklen_t*))
WEFT_REAL_CALL(close, int(int))
WEFT_REAL_CALL(close_range, int(unsigned int, unsigned int, int))
WEFT_REAL_CALL(closefrom, void(int))
WEFT_REAL_CALL(fclose, int(FILE*))
WEFT_REAL_CALL(shutdown, int(int, int))
WEFT_REAL_CALL(open, int(const char*, int, ...))
WEFT_REAL_CALL(open64, int(const char*, int, ...))
WEFT_REAL_CALL(openat, int(int, const char*, int, ...))
WEFT_REAL_CALL(openat64, int(int, const char*, int, ...))
WEFT_REAL_CALL(creat, int(const char*, mode_t))
WEFT_REAL_CALL(creat64, int(const char*, mode_t))
WEFT_REAL_CALL(__open_2, int(const char*, int))
WEFT_REAL_CALL(__open64_2, int(const char*, int))
WEFT_REAL_CALL(__openat_2, int(int, const char*, int))
WEFT_REAL_CALL(__openat64_2, int(int, const char*, int))
WEFT_REAL_CALL(fopen, FILE*(const char*, const char*))
WEFT_REAL_CALL(fopen64, FILE*(const char*, const char*))
WEFT_REAL_CALL(freopen, FILE*(const char*, const char*, FILE*))
WEFT_REAL_CALL(freopen64, FILE*(const char*, const char*, FILE*))
WEFT_REAL_CALL(eventfd, int(unsigned int, int))
WEFT_REAL_CALL(epoll_create, int(int))
WEFT_REAL_CALL(epoll_create1, int(int))
WEFT_REAL_CALL(epoll_ctl, int(int, int, int, epoll_event*))
WEFT_REAL_CALL(timerfd_create, int(int, int))
WEFT_REAL_CALL(signalfd, int(int, const sigset_t*, int))
WEFT_REAL_CALL(inotify_init, int())
WEFT_REAL_CALL(inotify_init1, int(int))
WEFT_REAL_CALL(sigaction, int(int, const struct sigaction*, struct sigaction*))
WEFT_REAL_CALL(signal, sighandler_t(int, sighandler_t))
WEFT_REAL_CALL(bsd_signal, sighandler_t(int, sighandler_t))
WEFT_REAL_CALL(ssignal, sighandler_t(int, sighandler_t))
WEFT_REAL_CALL(sysv_signal, sighandler_t(int, sighandler_t))
WEFT_REAL_CALL(__sysv_signal, sighandler_t(int, sighandler_t))
WEFT_REAL_CALL(sigset, sighandler_t(int, sighandler_t))
// Child processes (hooks/hooks_processes.cpp, hooks/hooks_popen.cpp).
WEFT_REAL_CALL(waitpid, pid_t(pid_t, int*, int))
WEFT_REAL_CALL(wait4, pid_t(pid_t, int*, int, struct rusage*))
WEFT_REAL_CALL(waitid, int(idtype_t, id_t, siginfo_t*, int))
WEFT_REAL_CALL(system, int(const char*))
WEFT_REAL_CALL(popen, FILE*(const char*, const char*))
WEFT_REAL_CALL(pclose, int(FILE*))
// Regular files (hooks/hooks_files.cpp).
WEFT_REAL_CALL(pread, ssize_t(int, void*, size_t, off_t))
WEFT_REAL_CALL(preadv, ssize_t(int, const iovec*, int, off_t))
WEFT_REAL_CALL(preadv2, ssize_t(int, const iovec*, int, off_t, int))
WEFT_REAL_CALL(fsync, int(int))
WEFT_REAL_CALL(fdatasync, int(int))
WEFT_REAL_CALL(sync_file_range, int(int, off_t, off_t, unsigned int))
// Calls that are only announced (hooks/hooks_announced.cpp).
WEFT_REAL_CALL(flock, int(int, int))
WEFT_REAL_CALL(lockf, int(int, int, off_t))
WEFT_REAL_CALL(lockf64, int(int, int, off64_t))
WEFT_REAL_CALL(pwrite, ssize_t(int, const void*, size_t, off_t))
WEFT_REAL_CALL(pwrite64, ssize_t(int, const void*, size_t, off64_t))
WEFT_REAL_CALL(pwritev, ssize_t(int, const iovec*, int, off_t))
WEFT_REAL_CALL(pwritev64, ssize_t(int, const iovec*, int, off64_t))
WEFT_REAL_CALL(pwritev2, ssize_t(int, const iovec*, int, off_t, int))
WEFT_REAL_CALL(ftruncate, int(int, off_t))
WEFT_REAL_CALL(ftruncate64, int(int, off64_t))
WEFT_REAL_CALL(fallocate, int(int, int, off_t, off_t))
WEFT_REAL_CALL(fallocate64, int(int, int, off64_t, off64_t))
WEFT_REAL_CALL(copy_file_range, ssize_t(int, off64_t*, int, off64_t*, size_t, unsigned int))
WEFT_REAL_CALL(sendfile, ssize_t(int, int, off_t*, size_t))
WEFT_REAL_CALL(sendfile64, ssize_t(int, int, off64_t*, size_t))
WEFT_REAL_CALL(splice, ssize_t(int, off64_t*, int, off64_t*, size_t, unsigned int))
WEFT_REAL_CALL(msync, int(void*, size_t, int))
WEFT_REAL_CALL(sync, void())
WEFT_REAL_CALL(syncfs, int(int))
WEFT_REAL_CALL(wait, pid_t(int*))
WEFT_REAL_CALL(pause, int())
WEFT_REAL_CALL(sigsuspend, int(const sigset_t*))
WEFT_REAL_CALL(sigwait, int(const sigset_t*, int*))
WEFT_REAL_CALL(sigwaitinfo, int(const sigset_t*, siginfo_t*))
WEFT_REAL_CALL(sigtimedwait, int(const sigset_t*, siginfo_t*, const timespec*))
WEFT_REAL_CALL(tcdrain, int(int))
WEFT_REAL_CALL(msgrcv, ssize_t(int, void*, size_t, long, int))
WEFT_REAL_CALL(msgsnd, int(int, const void*, size_t, int))
WEFT_REAL_CALL(semop, int(int, struct sembuf*, size_t))
WEFT_REAL_CALL(semtimedop, int(int, struct sembuf*, size_t, const timespec*))
WEFT_REAL_CALL(mq_receive, ssize_t(mqd_t, char*, size_t, unsigned int*))
WEFT_REAL_CALL(mq_timedreceive, ssize_t(mqd_t, char*, size_t, unsigned int*, const timespec*))
WEFT_REAL_CALL(mq_send, int(mqd_t, const char*, size_t, unsigned int))
WEFT_REAL_CALL(mq_timedsend, int(mqd_t, const char*, size_t, unsigned int, const timespec*))
WEFT_REAL_CALL(sem_wait, int(sem_t*))
WEFT_REAL_CALL(sem_timedwait, int(sem_t*, const timespec*))
WEFT_REAL_CALL(sem_clockwait, int(sem_t*, clockid_t, const timespec*))
WEFT_REAL_CALL(pthread_join, int(pthread_t, void**))
WEFT_REAL_CALL(pthread_timedjoin_np, int(pthread_t, void**, const timespec*))
WEFT_REAL_CALL(pthread_clockjoin_np, int(pthread_t, void**, clockid_t, const timespec*))
WEFT_REAL_CALL(pthread_barrier_wait, int(pthread_barrier_t*))
WEFT_REAL_CALL(thrd_join, int(thrd_t, int*))
WEFT_REAL_CALL(res_query, int(const char*, int, int, unsigned char*, int))
WEFT_REAL_CALL(res_search, int(const char*, int, int, unsigned char*, int))
WEFT_REAL_CALL(res_querydomain, int(const char*, const char*, int, int, unsigned char*, int))
WEFT_REAL_CALL(res_send, int(const unsigned char*, int, unsigned char*, int))
WEFT_REAL_CALL(res_nquery, int(struct __res_state*, const char*, int, int, unsigned char*, int))
WEFT_REAL_CALL(res_nsearch, int(struct __res_state*, const char*, int, int, unsigned char*, int))
WEFT_REAL_CALL(res_nquerydomain, int(struct __res_state*, const char*, const char*, int, int, unsigned char*, int))
WEFT_REAL_CALL(res_nsend, int(struct __res_state*, const unsigned char*, int, unsigned char*, int))
WEFT_REAL_CALL(gai_suspend, int(const gaicb* const[], int, const timespec*))
WEFT_REAL_CALL(getaddrinfo_a, int(int, gaicb*[], int, sigevent*))
WEFT_REAL_CALL(thrd_sleep, int(const timespec*, timespec*))
WEFT_REAL_CALL(sched_yield, int())
WEFT_REAL_CALL(syscall, long(long, ...))
WEFT_REAL_CALL(pthread_once, int(pthread_once_t*, void (*)()))
WEFT_REAL_CALL(thrd_yield, void())
WEFT_REAL_CALL(pthread_spin_lock, int(pthread_spinlock_t*))
WEFT_REAL_CALL(pthread_spin_trylock, int(pthread_spinlock_t*))
WEFT_REAL_CALL(posix_spawn, int(pid_t*, const char*, const posix_spawn_file_actions_t*, const posix_spawnattr_t*,
                                char* const*, char* const*))
WEFT_REAL_CALL(posix_spawnp, int(pid_t*, const char*, const posix_spawn_file_actions_t*, const posix_spawnattr_t*,
                                 char* const*, char* const*))
WEFT_REAL_CALL(posix_spawn_file_actions_adddup2, int(posix_spawn_file_actions_t*, int, int))
// The lock hooks' (hooks/locks.h), for the objects they pass through.
WEFT_REAL_CALL(pthread_mutex_lock, int(pthread_mutex_t*))
WEFT_REAL_CALL(pthread_mutex_trylock, int(pthread_mutex_t*))
WEFT_REAL_CALL(pthread_mutex_timedlock, int(pthread_mutex_t*, const timespec*))
WEFT_REAL_CALL(pthread_mutex_clocklock, int(pthread_mutex_t*, clockid_t, const timespec*))
WEFT_REAL_CALL(pthread_mutex_unlock, int(pthread_mutex_t*))
WEFT_REAL_CALL(pthread_cond_wait, int(pthread_cond_t*, pthread_mutex_t*))
WEFT_REAL_CALL(pthread_cond_timedwait, int(pthread_cond_t*, pthread_mutex_t*, const timespec*))
WEFT_REAL_CALL(pthread_cond_clockwait, int(pthread_cond_t*, pthread_mutex_t*, clockid_t, const timespec*))
WEFT_REAL_CALL(pthread_cond_signal, int(pthread_cond_t*))
WEFT_REAL_CALL(pthread_cond_broadcast, int(pthread_cond_t*))
WEFT_REAL_CALL(pthread_cancel, int(pthread_t))
WEFT_REAL_CALL(pthread_rwlock_rdlock, int(pthread_rwlock_t*))
WEFT_REAL_CALL(pthread_rwlock_tryrdlock, int(pthread_rwlock_t*))
WEFT_REAL_CALL(pthread_rwlock_timedrdlock, int(pthread_rwlock_t*, const timespec*))
WEFT_REAL_CALL(pthread_rwlock_clockrdlock, int(pthread_rwlock_t*, clockid_t, const timespec*))
WEFT_REAL_CALL(pthread_rwlock_wrlock, int(pthread_rwlock_t*))
WEFT_REAL_CALL(pthread_rwlock_trywrlock, int(pthread_rwlock_t*))
WEFT_REAL_CALL(pthread_rwlock_timedwrlock, int(pthread_rwlock_t*, const timespec*))
WEFT_REAL_CALL(pthread_rwlock_clockwrlock, int(pthread_rwlock_t*, clockid_t, const timespec*))
WEFT_REAL_CALL(pthread_rwlock_unlock, int(pthread_rwlock_t*))

#undef WEFT_REAL_CALL

}  // namespace weft::detail::real

namespace weft::detail {

int errno_value() noexcept;
void set_errno(int value) noexcept;

}  // namespace weft::detail
