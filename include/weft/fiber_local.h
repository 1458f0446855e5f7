// weft::FiberLocal<T>: a variable with one instance per fiber, the fiber's
// answer to thread_local (which is per worker, and a fiber may move between
// workers at any suspension point).
//
//   weft::FiberLocal<RequestContext> request;   // e.g. at namespace scope
//   ...inside a fiber:
//   request->trace_id = id;                     // this fiber's own copy
//
// Each FiberLocal takes a slot index when constructed; access is an index
// into the fiber's slot array, not a map lookup. A slot is never given
// back: make FiberLocals static (at namespace scope, or function-local
// statics), not one per request or per object, or every fiber's array
// grows with each one made (and a value stays until its fiber ends).
//
// The value is created (default-constructed) on first access in a fiber
// and destroyed when that fiber finishes, in reverse slot order (the
// order the FiberLocals were constructed). A destructor may use other
// FiberLocals: a value it makes (one not made yet, or destroyed already)
// is destroyed by another pass, up to 4 passes, as pthread's key
// destructors (PTHREAD_DESTRUCTOR_ITERATIONS); one made in the last pass
// is not destroyed. Access from a plain thread throws std::logic_error.
#pragma once

#include <cstddef>

#include "detail/require_cxx20.h"
#include "detail/visibility.h"

namespace weft {

namespace detail {
WEFT_API std::size_t allocate_fiber_local_slot() noexcept;
// The calling fiber's value in `slot`, or null; throws off a fiber.
WEFT_API void* fiber_local_get(std::size_t slot);
WEFT_API void fiber_local_set(std::size_t slot, void* value, void (*destroy)(void*));
}  // namespace detail

template <class T>
class FiberLocal {
 public:
  FiberLocal() : slot_(detail::allocate_fiber_local_slot()) {}
  FiberLocal(const FiberLocal&) = delete;
  FiberLocal& operator=(const FiberLocal&) = delete;

  T& get() {
    if (void* value = detail::fiber_local_get(slot_)) return *static_cast<T*>(value);
    T* created = new T();
    detail::fiber_local_set(slot_, created, [](void* p) { delete static_cast<T*>(p); });
    return *created;
  }
  T& operator*() { return get(); }
  T* operator->() { return &get(); }

 private:
  std::size_t slot_;
};

}  // namespace weft
