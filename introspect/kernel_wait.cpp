#include "kernel_wait.h"

#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../sched/kernel_call.h"
#include "../sched/thread_wait.h"
#include "fd_info.h"

namespace weft::detail {
namespace {

// The whole of a small /proc file, "" if it cannot be read.
std::string read_proc(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buffer[4096];
  const ssize_t n = ::read(fd, buffer, sizeof(buffer) - 1);
  ::close(fd);
  return n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : std::string();
}

std::string task_path(int tid, const char* file) {
  return std::string("/proc/self/task/") + std::to_string(tid) + "/" + file;
}

std::string hex(unsigned long value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%lx", value);
  return text;
}

// se.exec_start of a /proc/<...>/sched file, in ms; -1 if absent.
double exec_start_ms(const std::string& path) {
  const std::string text = read_proc(path.c_str());
  const std::size_t at = text.find("se.exec_start");
  if (at == std::string::npos) return -1;
  const std::size_t colon = text.find(':', at);
  if (colon == std::string::npos) return -1;
  return std::strtod(text.c_str() + colon + 1, nullptr);
}

}  // namespace

KernelWait read_kernel_wait(int tid) {
  KernelWait call;
  if (tid <= 0) return call;
  const std::string text = read_proc(task_path(tid, "syscall").c_str());
  // "running", "-1 sp pc" (asleep, but not in a system call: a page
  // fault), or "nr arg1 ... arg6 sp pc", the numbers after nr in hex.
  char* end = nullptr;
  const long number = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || number < 0) return call;
  const char* at = end;
  for (unsigned long& arg : call.args) arg = std::strtoul(at, const_cast<char**>(&at), 16);
  call.sp = std::strtoul(at, const_cast<char**>(&at), 16);
  call.pc = std::strtoul(at, const_cast<char**>(&at), 16);
  call.number = number;
  return call;
}

std::string describe_kernel_wait(const KernelWait& call, const ThreadWait* wait) {
  if (call.number < 0) return {};
  const char* name = syscall_name(call.number);
  std::string text = name != nullptr ? name : std::string("syscall ") + std::to_string(call.number);
  const std::string_view n = name != nullptr ? name : "";
  if (syscall_takes_fd(call.number)) {
    const int fd = static_cast<int>(call.args[0]);
    const std::string what = describe_fd(fd);
    // A connected socket by its peer (the end a reader looks for), the
    // rest as weft-dump names an fd.
    const std::size_t arrow = what.find(" -> ");
    return text + std::string("(fd ") + std::to_string(fd) +
           (arrow != std::string::npos ? what.substr(arrow)
            : what.empty()             ? std::string()
                                       : ": " + what) +
           ")";
  }
  if (n == "wait4" || n == "waitid") {
    const long id = static_cast<long>(static_cast<int>(n == "wait4" ? call.args[0] : call.args[1]));
    return text + (id > 0 ? std::string("(pid ") + std::to_string(id) + ")" : id == -1 ? "(any child)" : "(...)");
  }
  if (n == "futex") {
    text += '(';
    text += hex(call.args[0]);
    text += ')';
    if (wait != nullptr) {
      const char* kind = wait->kind.load(std::memory_order_acquire);
      if (kind != nullptr &&
          reinterpret_cast<std::uintptr_t>(wait->futex.load(std::memory_order_relaxed)) == call.args[0]) {
        text += " on ";
        text += kind;
        if (const void* object = wait->object.load(std::memory_order_relaxed)) {
          text += '@';
          text += hex(reinterpret_cast<std::uintptr_t>(object));
        }
        if (const char* operation = wait->operation.load(std::memory_order_relaxed))
          text += std::string(" (") + operation + ")";
      }
    }
    return text;
  }
  return text;
}

double off_cpu_ms(int tid) {
  const double them = exec_start_ms(task_path(tid, "sched"));
  const double us = exec_start_ms("/proc/thread-self/sched");
  if (them < 0 || us < 0) return -1;
  return us > them ? us - them : 0;
}

std::string thread_state_name(int tid) {
  const std::string text = read_proc(task_path(tid, "status").c_str());
  // "State:\tS (sleeping)"
  const std::size_t at = text.find("State:");
  if (at == std::string::npos) return {};
  const std::size_t open = text.find('(', at), close = text.find(')', at);
  if (open == std::string::npos || close == std::string::npos || close < open) return {};
  return text.substr(open + 1, close - open - 1);
}

}  // namespace weft::detail
