// detail::Task: a move-only callable with no arguments, what weft::Pool
// queues. std::function needs copyable targets, and a submit()'s task owns
// a Promise, which moves only; std::move_only_function is C++23.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

#include "require_cxx20.h"
#include "user_call.h"

namespace weft::detail {

class Task {
 public:
  Task() noexcept = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, Task>>>
  explicit Task(F&& fn) : body_(std::make_unique<Model<std::decay_t<F>>>(std::forward<F>(fn))) {}
  Task(Task&&) noexcept = default;
  Task& operator=(Task&&) noexcept = default;

  explicit operator bool() const noexcept { return body_ != nullptr; }
  void operator()() { body_->run(); }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual void run() = 0;
  };
  template <class F>
  struct Model final : Concept {
    explicit Model(F&& f) : fn(std::move(f)) {}
    explicit Model(const F& f) : fn(f) {}
    void run() override {
      fn();
      returned_from_user_code();
    }
    F fn;
  };
  std::unique_ptr<Concept> body_;
};

}  // namespace weft::detail
