#include <pthread.h>
#include <weft/this_fiber.h>
#include <weft/thread.h>

#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "../runtime/log.h"
#include "thread_registry.h"

namespace weft {

namespace detail {

void name_this_thread(std::string_view name) noexcept {
  // The kernel keeps 15 bytes and a terminator.
  const std::string shown(name.substr(0, 15));
  pthread_setname_np(pthread_self(), shown.c_str());
}

void thread_left_joinable(std::string_view name, const char* what) noexcept {
  const std::string shown(name);
  log_message(LogLevel::fatal, "weft: a joinable weft::Thread (\"%s\") was %s; join or detach it first", shown.c_str(),
              what);
  std::terminate();
}

void run_listed_thread(std::string_view name, void (*body)(void*), void* context) noexcept {
  name_this_thread(name);
  const ThreadListing listed(std::string(name), "", "thread");
  body(context);
}

}  // namespace detail

void Thread::join() {
  if (!joinable())
    throw std::system_error(std::make_error_code(std::errc::invalid_argument), "weft::Thread::join: not joinable");
  if (thread_.joinable()) {
    // Checked here rather than left to pthread_join's EDEADLK, which
    // ThreadSanitizer's interceptor does not survive.
    if (thread_.get_id() == std::this_thread::get_id())
      throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                              "weft::Thread::join: a thread cannot join itself");
    thread_.join();
    return;
  }
  if (this_fiber::is_fiber() && this_fiber::id() == fiber_.id())
    throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                            "weft::Thread::join: a thread cannot join itself");
  fiber_.join();
}

void Thread::detach() {
  if (!joinable())
    throw std::system_error(std::make_error_code(std::errc::invalid_argument), "weft::Thread::detach: not joinable");
  if (thread_.joinable())
    thread_.detach();
  else
    fiber_.detach();
}

}  // namespace weft
