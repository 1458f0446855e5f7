// Symbolizing the addresses of parked fibers' stacks, in the process, on the
// dump server's thread: function names (demangled), and source file and
// line where the code has debug information (-g).
//
// Boost.Stacktrace does the lookups, with its libbacktrace backend
// (libboost_stacktrace_backtrace): the dynamic symbol table through dladdr
// first, then the full symbol table and DWARF of every loaded object.
// libbacktrace reads an object's tables on the first lookup in it and keeps
// them for the thread (the first dump of a process pays ~0.2 s for that).
// Each distinct address is looked up once per dump: 100,000 fibers parked
// at the same few call sites cost a few dozen lookups.
//
// A return address is looked up one byte back, inside the call instruction,
// so that a call that ends a function (a noreturn callee) is not taken for
// the next function, and the line is the call's.
#pragma once

#include <weft/snapshot.h>

#include <cstdint>

namespace weft::detail {

// What `return_address` is; false when no loaded object holds it (a stale
// or garbage link at the end of a walk).
bool symbolize(std::uintptr_t return_address, FrameSymbol& symbol);

// Fills snapshot.symbols for every address of every fiber's stack, and cuts
// each stack at its first address that is in no loaded object: a frame of
// code built without frame pointers leaves such a link, and nothing found
// above it can be trusted.
void symbolize_stacks(ProcessSnapshot& snapshot);

}  // namespace weft::detail
