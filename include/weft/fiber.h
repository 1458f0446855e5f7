// weft::Fiber: the handle to a spawned fiber, with std::thread's contract.
//
//   weft::Fiber f = sched.spawn([] { work(); });
//   f.join();            // waits; rethrows what escaped the fiber
//
// A handle destroyed (or assigned over) while joinable() terminates the
// process, as std::thread does: join() or detach() every fiber. join() parks
// a calling fiber and blocks a calling plain thread.
#pragma once

#include <cstdint>
#include <string>

#include "detail/require_cxx20.h"
#include "detail/visibility.h"
#include "snapshot.h"

namespace weft {

namespace detail {
struct FiberControl;
struct FiberAccess;
}  // namespace detail

class WEFT_API Fiber {
 public:
  Fiber() noexcept = default;
  Fiber(Fiber&& other) noexcept : control_(other.control_), id_(other.id_), joinable_(other.joinable_) {
    other.control_ = nullptr;
    other.joinable_ = false;
  }
  Fiber& operator=(Fiber&& other) noexcept;
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
  ~Fiber();

  // Waits for the fiber to finish; rethrows an exception that escaped it.
  // Throws std::logic_error if not joinable, or when a fiber joins itself.
  void join();
  // Lets the fiber run on unowned. An exception escaping it then ends the
  // process (or goes to Config::on_unhandled_exception).
  void detach();
  bool joinable() const noexcept { return joinable_; }
  // The fiber's id (kept after join/detach; 0 for an empty handle).
  std::uint64_t id() const noexcept { return id_; }
  // The fiber's name; "" after detach().
  std::string name() const;
  bool done() const noexcept;  // finished running (join will not wait)
  // The fiber's counters so far (final once joined); zeros after detach().
  FiberCounts counts() const noexcept;

 private:
  friend struct detail::FiberAccess;
  explicit Fiber(detail::FiberControl* control) noexcept;

  void release() noexcept;

  // Kept after join() so that name() and counts() still answer; released
  // by detach(), reassignment and destruction.
  detail::FiberControl* control_ = nullptr;
  std::uint64_t id_ = 0;
  bool joinable_ = false;
};

}  // namespace weft
