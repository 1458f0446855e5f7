#include "child_parent.h"

namespace weft::detail {
namespace {

// Initial-exec: no allocation on a thread's first touch, so a signal
// handler's fork may set it.
[[gnu::tls_model("initial-exec")]] constinit thread_local bool child_made_here = false;

}  // namespace

void note_child_made() noexcept { child_made_here = true; }

bool made_a_child() noexcept { return child_made_here; }

}  // namespace weft::detail
