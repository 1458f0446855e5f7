#include "os_thread.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "../runtime/system_calls.h"

namespace weft::detail {

void OsThread::record_calling_thread() noexcept {
  tid_.store(static_cast<int>(sys::call(SYS_gettid)), std::memory_order_relaxed);
  if (pthread_getcpuclockid(pthread_self(), &cpu_clock_) == 0) cpu_clock_valid_.store(true, std::memory_order_release);
}

std::int64_t OsThread::cpu_time_ns() const noexcept {
  timespec ts{};
  if (!cpu_clock_valid_.load(std::memory_order_acquire) || ::clock_gettime(cpu_clock_, &ts) != 0) return 0;
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

char OsThread::state() const noexcept {
  const int tid = id();
  if (tid == 0) return '?';
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
  char buffer[512];
  if (sys::read_small_file(path, buffer, sizeof(buffer)) < 0) return '?';
  // "tid (name) S ...": the name may hold spaces and parentheses.
  const char* paren = std::strrchr(buffer, ')');
  return paren != nullptr && paren[1] == ' ' && paren[2] != '\0' ? paren[2] : '?';
}

}  // namespace weft::detail
