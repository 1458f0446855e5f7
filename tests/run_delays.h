// What the OS did to this process's threads: how long each waited,
// runnable, for a CPU (the second field of /proc/self/task/<tid>/schedstat)
// since a RunDelays was made. A worker that never parks is always
// runnable, so on a loaded machine it waits far longer than a plain thread
// that sleeps, and a fiber queued behind it is late by that wait; a worker
// asleep in futex(2) (a lost wake-up) waits for nothing and adds none. The
// timing tests use it to tell the machine's delays from weft's.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <system_error>

namespace weft::test {

class RunDelays {
 public:
  RunDelays() : start_(read()) {}

  // The sum of the two longest waits: what a ticker's lateness may owe to
  // the OS (its worker's wait and sysmon's).
  double two_worst_ms() const {
    std::int64_t first = 0, second = 0;
    for (const auto& [tid, waited] : waits()) {
      if (waited > first) {
        second = first;
        first = waited;
      } else if (waited > second) {
        second = waited;
      }
    }
    return static_cast<double>(first + second) / 1e6;
  }

  // The waits of all threads, summed.
  double total_ms() const {
    std::int64_t total = 0;
    for (const auto& [tid, waited] : waits()) total += waited;
    return static_cast<double>(total) / 1e6;
  }

  // The longest wait of any thread but `tid` (a gettid() value).
  double longest_ms_except(long tid) const {
    std::int64_t longest = 0;
    for (const auto& [other, waited] : waits())
      if (other != tid && waited > longest) longest = waited;
    return static_cast<double>(longest) / 1e6;
  }

  static long this_thread_id() { return static_cast<long>(::syscall(SYS_gettid)); }

 private:
  std::map<long, std::int64_t> waits() const {
    std::map<long, std::int64_t> out;
    for (const auto& [tid, delay] : read()) {
      const auto it = start_.find(tid);
      out[tid] = delay - (it == start_.end() ? 0 : it->second);
    }
    return out;
  }
  static std::map<long, std::int64_t> read() {
    std::map<long, std::int64_t> delays;
    std::error_code error;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", error)) {
      std::ifstream stat(task.path() / "schedstat");
      std::int64_t ran = 0, waited = 0;
      if (stat >> ran >> waited) delays[std::stol(task.path().filename().string())] = waited;
    }
    return delays;
  }
  std::map<long, std::int64_t> start_;
};

}  // namespace weft::test
