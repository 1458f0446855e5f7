#include <weft/detail/park.h>
#include <weft/fiber.h>

#include <cstdio>
#include <exception>
#include <mutex>
#include <stdexcept>

#include "../runtime/fiber_control.h"
#include "../runtime/log.h"
#include "scheduler_core.h"
#include "wait_owner.h"

namespace weft {
namespace {

// A joiner waits for the fiber it joins: that fiber is what it waits on,
// and its owner (sched/wait_owner.h).
detail::WaitOwner joined_fiber(const void* control) noexcept {
  return {detail::fiber_id_at(static_cast<const detail::FiberControl*>(control)), 0};
}
[[maybe_unused]] const bool joins_registered = detail::register_wait_owner("weft::Fiber", &joined_fiber);

}  // namespace

Fiber::Fiber(detail::FiberControl* control) noexcept : control_(control), id_(control->id), joinable_(true) {}

void Fiber::release() noexcept {
  if (control_ != nullptr) control_->release_reference();
  control_ = nullptr;
}

Fiber& Fiber::operator=(Fiber&& other) noexcept {
  if (this != &other) {
    if (joinable()) {
      detail::log_message(LogLevel::fatal,
                          "weft: a joinable weft::Fiber (#%llu) was assigned over; join or detach it first",
                          static_cast<unsigned long long>(id_));
      std::terminate();
    }
    release();
    control_ = other.control_;
    id_ = other.id_;
    joinable_ = other.joinable_;
    other.control_ = nullptr;
    other.joinable_ = false;
  }
  return *this;
}

Fiber::~Fiber() {
  if (joinable()) {
    detail::log_message(LogLevel::fatal,
                        "weft: a joinable weft::Fiber (#%llu \"%s\") was destroyed; join or detach it first",
                        static_cast<unsigned long long>(id_), control_->name().c_str());
    std::terminate();
  }
  release();
}

void Fiber::join() {
  if (!joinable()) throw std::logic_error("weft::Fiber::join: the fiber is not joinable");
  if (detail::current_fiber() == control_) throw std::logic_error("weft::Fiber::join: a fiber cannot join itself");
  // A child that has already finished needs no lock: `finished` is set
  // (release) after its exception is stored, and never cleared.
  auto finished = [this] {
    return (control_->end_flags.load(std::memory_order_acquire) & detail::FiberControl::finished) != 0;
  };
  // In a forked child, a fiber of the parent's that had not finished at the
  // fork never will (a finished one is joined as a finished thread is).
  if (!finished() && control_->scheduler->in_forked_child())
    throw std::logic_error(
        "weft::Fiber::join: the fiber is the parent process's (this is a forked child), of "
        "scheduler \"" +
        control_->scheduler->config().name + "\"; its end is not seen here");
  if (!finished())
    detail::wait_unless(control_->joiners, control_->join_lock, finished, {"weft::Fiber", control_, "join"});
  joinable_ = false;
  std::exception_ptr exception = std::move(control_->exception);
  if (exception) std::rethrow_exception(exception);
}

void Fiber::detach() {
  if (!joinable()) throw std::logic_error("weft::Fiber::detach: the fiber is not joinable");
  const auto flags = control_->end_flags.fetch_or(detail::FiberControl::detached, std::memory_order_acq_rel);
  if ((flags & detail::FiberControl::finished) != 0 && control_->exception)
    control_->scheduler->report_unhandled(control_);
  joinable_ = false;
  release();
}

std::string Fiber::name() const { return control_ != nullptr ? control_->name() : std::string(); }

bool Fiber::done() const noexcept {
  return control_ != nullptr &&
         (control_->end_flags.load(std::memory_order_acquire) & detail::FiberControl::finished) != 0;
}

}  // namespace weft

namespace weft {

FiberCounts Fiber::counts() const noexcept {
  return control_ != nullptr ? detail::read_counts(*control_) : FiberCounts{};
}

}  // namespace weft
