// The calls that may sleep in the kernel for as long as something else
// takes, and that nothing can park on: hooked only to announce them
// (hooks/announced.h), so that the worker's other fibers move to another
// thread while one waits here. The result, errno and signals are libc's:
// the call is libc's, made on the same thread.
//
//   file locks     flock, lockf (fcntl's F_SETLKW is in hooks_fd_state.cpp)
//   file writes    pwrite, pwritev (write and writev: hooks_io_calls.cpp),
//                  ftruncate, fallocate, copy_file_range, sendfile, splice,
//                  msync, sync, syncfs
//   processes      wait (any child: no pidfd serves it)
//   signals        pause, sigsuspend, sigwait, sigwaitinfo, sigtimedwait
//   terminals      tcdrain
//   System V IPC   msgrcv, msgsnd, semop, semtimedop
//   POSIX IPC      mq_receive, mq_send, mq_timedreceive, mq_timedsend
//   threads        sem_wait, sem_timedwait, sem_clockwait, pthread_join,
//                  pthread_timedjoin_np, pthread_clockjoin_np,
//                  pthread_barrier_wait, thrd_join (what a fiber waits for
//                  here is a thread, or a semaphore any thread or process
//                  may post: nothing a fiber could park on and be woken by;
//                  the semaphores' and the barrier's waits are made on a
//                  helper while the fiber parks, beside a pinned fiber:
//                  waited_for_another, below)
// The calls that wait for another party to act (the file locks, wait, the
// signals, the IPC, the threads, a terminal's drain, and sendfile and
// splice where a pipe, socket or terminal is an end) say so,
// Sleeps::until_woken: the party may be a fiber pinned to this worker,
// which sysmon then releases.
//   DNS queries    res_query, res_search, res_querydomain, res_send, and
//                  the __res_* names binaries built against glibc before
//                  2.34 call (glibc's resolver makes its poll, send and
//                  recv inside libc, where no hook sees them). Not
//                  offloaded to helper threads as getaddrinfo is
//                  (hooks_resolver.cpp): they use the calling thread's
//                  _res, its options and nameservers, which a helper does
//                  not have. They wait for a nameserver (until_woken):
//                  fibers pinned here by their hooks move after a second.
//                  Their res_n* forms, whose state is an argument, are made
//                  on a helper while the fiber parks (offloaded_query),
//                  unless that state is the calling thread's own _res
//                  (query_on_state).
//   async DNS      gai_suspend, and getaddrinfo_a with GAI_WAIT: they wait
//                  for lookups glibc makes on threads of its own, on a
//                  futex inside libc; made on a helper while the fiber
//                  parks (offloaded_query), as res_nquery, unless
//                  gai_suspend cannot wait (cannot_wait, below).
#undef _FILE_OFFSET_BITS
#include <fcntl.h>
#include <mqueue.h>
#include <pthread.h>
#include <resolv.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/sendfile.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <threads.h>
#include <unistd.h>

#include <cerrno>

#include "../io/blocking_pool.h"
#include "../sched/current.h"
#include "../sched/worker.h"
#include "announced.h"
#include "offload.h"
#include "real_calls.h"

namespace weft::detail {
namespace {

// A query with its resolver state in an argument: on a helper of the
// blocking pool while the fiber parks, as getaddrinfo (hooks_resolver.cpp),
// so that the fibers pinned to this worker by their hooks run meanwhile;
// errno and h_errno as the caller's thread would have them (offload.h).
template <class Query>
int offloaded_query(Query&& query) {
  if (!parking_enabled()) return query();
  const CheckpointOnReturn at_return;
  return offloaded(query);
}

// A res_n* query on `state`. The calling thread's own _res (`&_res`, as
// Firefox and PowerDNS pass it) is, in a fiber, its worker's, which every
// fiber of the worker shares; glibc's resolver state serves one query at a
// time (its sockets, its query ids), and queries offloaded side by side on
// it took each other's replies and closed each other's sockets. So a query
// on it stays on this thread, announced, as res_query does; one on a state
// of the caller's own goes to a helper.
template <class Query>
int query_on_state(res_state state, Query&& query) {
  if (state == __res_state()) return announced_hook(query, Sleeps::until_woken);
  return offloaded_query(query);
}

// A wait that another party ends (a post, the last arrival at a barrier, a
// thread's end). Announced, the call blocks this thread, and the worker's
// other fibers move to other threads, all but those pinned here: if the
// other party is one of them (a fiber parked in a hook, whose caller's
// errno lives on this thread), its wake waits for the thread, which waits
// for it, until sysmon releases its pin (1 s). So while any fiber is pinned
// to this worker, the call is made on a helper of the fiber's blocking pool
// while the fiber parks, as a futex wait is (hooks_futex.cpp), when a
// helper is free at once; else, and when nothing is pinned here (nothing
// can pin itself here while this thread waits), it is announced, which
// costs a fraction of a helper's round trip (docs/benchmarks.md), as a
// wait for another party: with no helper free, sysmon releases the pins
// once it has lasted (announced as `maybe`, they stayed for good, and a
// post made after a usleep never came). `site` is
// weft-dump's wait. Results and errno are the call's; on a helper a signal
// handled on the worker meanwhile does not interrupt it, as for the hooks'
// other parks.
template <class Call>
auto waited_for_another(const WaitSite& site, Call&& call) {
  if (parking_enabled() && current_worker()->pinned_count() != 0)
    if (BlockingPool* pool = BlockingPool::find(*current_fiber()->scheduler))
      if (const auto result = offloaded_if_helper_free(*pool, call, site)) return *result;
  return announced_hook(call, Sleeps::until_woken);
}

// In a fiber, a semaphore with a count is taken at once, as glibc's
// sem_wait takes it, without a helper: true, `result` the answer (or an
// error of sem_trywait's own, errno set). False if it must wait, errno
// then as it was.
bool taken_at_once(sem_t* semaphore, int& result) {
  if (!parking_enabled()) return false;
  const int saved = errno;
  result = sem_trywait(semaphore);
  if (result == 0 || errno != EAGAIN) return true;
  errno = saved;
  return false;
}

// A semaphore's wait, `wait()` glibc's, once its deadline is checked:
// the count taken at once, or the wait.
template <class Wait>
int semaphore_wait(sem_t* semaphore, Wait&& wait) {
  int taken;
  if (taken_at_once(semaphore, taken)) return taken;
  return waited_for_another({"sem_t", semaphore, "wait"}, wait);
}

// glibc checks a semaphore wait's deadline before it looks at the count,
// "even if we don't end up waiting": so does the hook, whose count comes
// first (taken_at_once).
int refused_deadline() noexcept {
  set_errno(EINVAL);
  return -1;
}

// A gai_suspend that returns at once: a zero timeout (a poll of whether
// a lookup is done), or no request of the list still in progress. Made
// inline: on a helper it would pay two hand-overs, and queue behind slow
// calls while every helper is busy.
bool cannot_wait(const gaicb* const list[], int count, const timespec* timeout) noexcept {
  if (timeout != nullptr && timeout->tv_sec == 0 && timeout->tv_nsec == 0) return true;
  for (int i = 0; i < count; ++i)
    if (list[i] != nullptr && ::gai_error(const_cast<gaicb*>(list[i])) == EAI_INPROGRESS) return false;
  return true;
}

}  // namespace
}  // namespace weft::detail

using namespace weft::detail;

extern "C" {
// libc's names, interposed: exported, unlike the rest of libweft
// (include/weft/detail/visibility.h).
#pragma GCC visibility push(default)

int flock(int fd, int operation) {
  return announced_hook([&] { return real::flock()(fd, operation); }, Sleeps::until_woken);
}
int lockf(int fd, int command, off_t length) {
  return announced_hook([&] { return real::lockf()(fd, command, length); }, Sleeps::until_woken);
}
int lockf64(int fd, int command, off64_t length) {
  return announced_hook([&] { return real::lockf64()(fd, command, length); }, Sleeps::until_woken);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t offset) {
  return announced_hook([&] { return real::pwrite()(fd, buf, n, offset); });
}
ssize_t pwrite64(int fd, const void* buf, size_t n, off64_t offset) {
  return announced_hook([&] { return real::pwrite64()(fd, buf, n, offset); });
}
ssize_t pwritev(int fd, const iovec* iov, int count, off_t offset) {
  return announced_hook([&] { return real::pwritev()(fd, iov, count, offset); });
}
ssize_t pwritev64(int fd, const iovec* iov, int count, off64_t offset) {
  return announced_hook([&] { return real::pwritev64()(fd, iov, count, offset); });
}
int ftruncate(int fd, off_t length) {
  return announced_hook([&] { return real::ftruncate()(fd, length); });
}
int ftruncate64(int fd, off64_t length) {
  return announced_hook([&] { return real::ftruncate64()(fd, length); });
}
int fallocate(int fd, int mode, off_t offset, off_t length) {
  return announced_hook([&] { return real::fallocate()(fd, mode, offset, length); });
}
int fallocate64(int fd, int mode, off64_t offset, off64_t length) {
  return announced_hook([&] { return real::fallocate64()(fd, mode, offset, length); });
}
ssize_t copy_file_range(int in, off64_t* in_offset, int out, off64_t* out_offset, size_t n, unsigned int flags) {
  return announced_hook([&] { return real::copy_file_range()(in, in_offset, out, out_offset, n, flags); });
}
// sendfile into a pipe, socket or terminal waits for its reader to make
// room, and splice, one of whose ends is a pipe, for its other party.
ssize_t sendfile(int out, int in, off_t* offset, size_t n) {
  return announced_hook([&] { return real::sendfile()(out, in, offset, n); }, sleeps_on_fds(out, in));
}
ssize_t sendfile64(int out, int in, off64_t* offset, size_t n) {
  return announced_hook([&] { return real::sendfile64()(out, in, offset, n); }, sleeps_on_fds(out, in));
}
ssize_t splice(int in, off64_t* in_offset, int out, off64_t* out_offset, size_t n, unsigned int flags) {
  return announced_hook([&] { return real::splice()(in, in_offset, out, out_offset, n, flags); }, Sleeps::until_woken);
}
// msync with MS_SYNC waits for the writeback of the range, as fsync does
// (hooks_files.cpp); MS_ASYNC and MS_INVALIDATE alone do not wait.
int msync(void* address, size_t length, int flags) {
  return announced_hook([&] { return real::msync()(address, length, flags); },
                        (flags & MS_SYNC) != 0 ? Sleeps::always : Sleeps::maybe);
}
// sync and syncfs wait for the writeback every time, as fsync does
// (hooks_files.cpp): the worker's queued fibers go to other threads at once.
void sync() noexcept {
  announced_hook([&] { real::sync()(); }, Sleeps::always);
}
int syncfs(int fd) noexcept {
  return announced_hook([&] { return real::syncfs()(fd); }, Sleeps::always);
}

pid_t wait(int* status) {
  return announced_hook([&] { return real::wait()(status); }, Sleeps::until_woken);
}

int pause() {
  return announced_hook([&] { return real::pause()(); }, Sleeps::until_woken);
}
int sigsuspend(const sigset_t* mask) {
  return announced_hook([&] { return real::sigsuspend()(mask); }, Sleeps::until_woken);
}
int sigwait(const sigset_t* set, int* signal) {
  return announced_hook([&] { return real::sigwait()(set, signal); }, Sleeps::until_woken);
}
int sigwaitinfo(const sigset_t* set, siginfo_t* info) {
  return announced_hook([&] { return real::sigwaitinfo()(set, info); }, Sleeps::until_woken);
}
int sigtimedwait(const sigset_t* set, siginfo_t* info, const timespec* timeout) {
  return announced_hook([&] { return real::sigtimedwait()(set, info, timeout); }, Sleeps::until_woken);
}

// Until the terminal's reader has taken what was written.
int tcdrain(int fd) {
  return announced_hook([&] { return real::tcdrain()(fd); }, Sleeps::until_woken);
}

ssize_t msgrcv(int queue, void* message, size_t size, long type, int flags) {
  return announced_hook([&] { return real::msgrcv()(queue, message, size, type, flags); }, Sleeps::until_woken);
}
int msgsnd(int queue, const void* message, size_t size, int flags) {
  return announced_hook([&] { return real::msgsnd()(queue, message, size, flags); }, Sleeps::until_woken);
}
int semop(int set, sembuf* operations, size_t count) {
  return announced_hook([&] { return real::semop()(set, operations, count); }, Sleeps::until_woken);
}
int semtimedop(int set, sembuf* operations, size_t count, const timespec* timeout) {
  return announced_hook([&] { return real::semtimedop()(set, operations, count, timeout); }, Sleeps::until_woken);
}

ssize_t mq_receive(mqd_t queue, char* message, size_t size, unsigned int* priority) {
  return announced_hook([&] { return real::mq_receive()(queue, message, size, priority); }, Sleeps::until_woken);
}
ssize_t mq_timedreceive(mqd_t queue, char* message, size_t size, unsigned int* priority, const timespec* timeout) {
  return announced_hook([&] { return real::mq_timedreceive()(queue, message, size, priority, timeout); },
                        Sleeps::until_woken);
}
int mq_send(mqd_t queue, const char* message, size_t size, unsigned int priority) {
  return announced_hook([&] { return real::mq_send()(queue, message, size, priority); }, Sleeps::until_woken);
}
int mq_timedsend(mqd_t queue, const char* message, size_t size, unsigned int priority, const timespec* timeout) {
  return announced_hook([&] { return real::mq_timedsend()(queue, message, size, priority, timeout); },
                        Sleeps::until_woken);
}

int sem_wait(sem_t* semaphore) {
  return semaphore_wait(semaphore, [&] { return real::sem_wait()(semaphore); });
}
int sem_timedwait(sem_t* semaphore, const timespec* deadline) {
  if (parking_enabled() && !valid_nanoseconds(deadline)) return refused_deadline();
  return semaphore_wait(semaphore, [&] { return real::sem_timedwait()(semaphore, deadline); });
}
int sem_clockwait(sem_t* semaphore, clockid_t clock, const timespec* deadline) {
  if (parking_enabled() && !(glibc_waits_on(clock) && valid_nanoseconds(deadline))) return refused_deadline();
  return semaphore_wait(semaphore, [&] { return real::sem_clockwait()(semaphore, clock, deadline); });
}

// The joins stay on the worker's thread, announced: made on a helper, a
// join of the worker's own thread (a fiber's pthread_self()) waited for it
// where glibc answers EDEADLK, and glibc's check of two threads joining
// each other saw the helper.
int pthread_join(pthread_t thread, void** result) {
  return announced_hook([&] { return real::pthread_join()(thread, result); }, Sleeps::until_woken);
}
int pthread_timedjoin_np(pthread_t thread, void** result, const timespec* deadline) {
  return announced_hook([&] { return real::pthread_timedjoin_np()(thread, result, deadline); }, Sleeps::until_woken);
}
int pthread_clockjoin_np(pthread_t thread, void** result, clockid_t clock, const timespec* deadline) {
  return announced_hook([&] { return real::pthread_clockjoin_np()(thread, result, clock, deadline); },
                        Sleeps::until_woken);
}
int pthread_barrier_wait(pthread_barrier_t* barrier) noexcept {
  return waited_for_another({"pthread_barrier_t", barrier, "wait"},
                            [&] { return real::pthread_barrier_wait()(barrier); });
}
int thrd_join(thrd_t thread, int* result) {
  return announced_hook([&] { return real::thrd_join()(thread, result); }, Sleeps::until_woken);
}

int res_query(const char* name, int klass, int type, unsigned char* answer, int length) noexcept {
  return announced_hook([&] { return real::res_query()(name, klass, type, answer, length); }, Sleeps::until_woken);
}
int res_search(const char* name, int klass, int type, unsigned char* answer, int length) noexcept {
  return announced_hook([&] { return real::res_search()(name, klass, type, answer, length); }, Sleeps::until_woken);
}
int res_querydomain(const char* name, const char* domain, int klass, int type, unsigned char* answer,
                    int length) noexcept {
  return announced_hook([&] { return real::res_querydomain()(name, domain, klass, type, answer, length); },
                        Sleeps::until_woken);
}
int res_send(const unsigned char* message, int message_length, unsigned char* answer, int length) noexcept {
  return announced_hook([&] { return real::res_send()(message, message_length, answer, length); }, Sleeps::until_woken);
}
int res_nquery(res_state state, const char* name, int klass, int type, unsigned char* answer, int length) noexcept {
  return query_on_state(state, [&] { return real::res_nquery()(state, name, klass, type, answer, length); });
}
int res_nsearch(res_state state, const char* name, int klass, int type, unsigned char* answer, int length) noexcept {
  return query_on_state(state, [&] { return real::res_nsearch()(state, name, klass, type, answer, length); });
}
int res_nquerydomain(res_state state, const char* name, const char* domain, int klass, int type, unsigned char* answer,
                     int length) noexcept {
  return query_on_state(state,
                        [&] { return real::res_nquerydomain()(state, name, domain, klass, type, answer, length); });
}
int res_nsend(res_state state, const unsigned char* message, int message_length, unsigned char* answer,
              int length) noexcept {
  return query_on_state(state, [&] { return real::res_nsend()(state, message, message_length, answer, length); });
}

int gai_suspend(const gaicb* const list[], int count, const timespec* timeout) {
  if (cannot_wait(list, count, timeout)) return real::gai_suspend()(list, count, timeout);
  return offloaded_query([&] { return real::gai_suspend()(list, count, timeout); });
}
int getaddrinfo_a(int mode, gaicb* list[], int count, sigevent* notification) {
  // GAI_NOWAIT starts glibc's threads and returns.
  if (mode != GAI_WAIT) return real::getaddrinfo_a()(mode, list, count, notification);
  return offloaded_query([&] { return real::getaddrinfo_a()(mode, list, count, notification); });
}

// The names glibc's <resolv.h> gave these calls before 2.34 (it defined
// res_query as __res_query, and so on): what older binaries call. glibc
// keeps them as the same functions under a compatibility version; here
// they are aliases of the hooks above.
int __res_query(const char*, int, int, unsigned char*, int) noexcept __attribute__((alias("res_query")));
int __res_search(const char*, int, int, unsigned char*, int) noexcept __attribute__((alias("res_search")));
int __res_querydomain(const char*, const char*, int, int, unsigned char*, int) noexcept
    __attribute__((alias("res_querydomain")));
int __res_send(const unsigned char*, int, unsigned char*, int) noexcept __attribute__((alias("res_send")));
int __res_nquery(res_state, const char*, int, int, unsigned char*, int) noexcept __attribute__((alias("res_nquery")));
int __res_nsearch(res_state, const char*, int, int, unsigned char*, int) noexcept __attribute__((alias("res_nsearch")));
int __res_nquerydomain(res_state, const char*, const char*, int, int, unsigned char*, int) noexcept
    __attribute__((alias("res_nquerydomain")));
int __res_nsend(res_state, const unsigned char*, int, unsigned char*, int) noexcept __attribute__((alias("res_nsend")));

#pragma GCC visibility pop
}  // extern "C"
