// Whether the calling thread runs a signal handler. A hooked call made
// there behaves exactly as libc's: it never parks and never yields at its
// checkpoint (the handler interrupted code that may hold any lock, a user's
// spin lock or malloc's, and a switch there could deadlock or corrupt it:
// docs/sysmon.md, "weft never switches fibers from a signal handler"),
// takes no lock that the interrupted code may hold, and leaves errno as the
// call left it.
//
// How it is known: every handler installed through libc's interfaces
// (sigaction, signal, bsd_signal, ssignal, sysv_signal, sigset) runs inside
// one of weft's trampolines (hooks_signals.cpp), which counts it here for
// as long as it runs, however it ends: by returning, by a longjmp out of it
// (glibc's longjmp runs the cleanup buffers of the frames it unwinds), or
// by a C++ exception.
#pragma once

namespace weft::detail {

// The handlers the calling thread is running, nested (initial-exec: read
// in a handler, where a dynamic TLS lookup could allocate).
[[gnu::tls_model("initial-exec")]] extern constinit thread_local unsigned signal_handler_depth;

inline bool in_signal_handler() noexcept { return signal_handler_depth != 0; }

// Wraps the handlers found installed (before libweft was loaded, or by a
// raw rt_sigaction or libc's internal __sigaction since) in the
// trampolines, so that they are counted too. Run once at load.
void wrap_installed_signal_handlers() noexcept;

}  // namespace weft::detail
