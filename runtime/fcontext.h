// The machine-level switch under ExecutionContext (runtime/context.h): save
// the callee-saved registers on the current stack, load another stack,
// restore its registers, go on there. Boost.Context's fcontext interface.
//
// On x86-64 it is weft's own (fcontext_x86_64.cpp), to keep the CPU's
// return-stack predictor in step with the stacks. Boost's jump_fcontext
// leaves by an indirect `jmp`: the `call` into it pushes a return address
// that no `ret` pops, so after every switch the predictor guesses each
// return one frame too deep, and every `ret` on the way up from a park or a
// yield was mispredicted: `switch_context`, `switch_away`, `park_current`,
// `park`, the primitive, its caller. Ours:
//
// - resumes a context by `ret`. The target was saved by the same call site,
//   so the predicted return address is the right one, and the predictor's
//   stack stays aligned;
// - enters a fresh context by `jmp`: it has no matching return address;
// - makes a finished context's last switch from its outermost frame, after
//   its entry has returned (weft_context_start). Every call the fiber
//   made has returned by then, so the predictor's stack holds what it held
//   when the fiber was entered: the return address of whoever switched to
//   it, often the very context resumed now.
//
// docs/benchmarks.md ("This stop's changes (stop 10)") has what each of the
// two saved in PingPong, yield and spawn+join.
//
// Elsewhere (aarch64's Boost leaves by `ret` already) it is Boost.Context's.
#pragma once

#include <boost/context/detail/fcontext.hpp>
#include <cstddef>

namespace weft::detail {

using boost::context::detail::fcontext_t;
using boost::context::detail::transfer_t;

// -DWEFT_BOOST_FCONTEXT builds the Boost.Context path on x86-64 too, so
// that tools/test can test it on this machine.
#if defined(__x86_64__) && defined(__ELF__) && !defined(WEFT_BOOST_FCONTEXT)
#define WEFT_OWN_FCONTEXT 1

// A fresh context's entry. It returns the context's last switch: the
// context to resume and the data to pass it, made once the entry's frames
// are gone.
using FreshEntry = transfer_t (*)(transfer_t);

extern "C" transfer_t weft_jump_fcontext(fcontext_t to, void* data);

// A context that, once jumped to, runs `entry` on the stack that ends at
// `stack_top` (`size` bytes long; unused here).
fcontext_t make_fcontext(void* stack_top, std::size_t size, FreshEntry entry) noexcept;

// Saves the caller, resumes `to`, passing it `data`; returns when switched
// back to, with the context that did so and its data.
inline transfer_t jump_fcontext(fcontext_t to, void* data) noexcept { return weft_jump_fcontext(to, data); }

#else

using boost::context::detail::jump_fcontext;
using boost::context::detail::make_fcontext;

#endif

}  // namespace weft::detail
