// What gdb needs to list a process's fibers and unwind their stacks without
// weft's cooperation: in a core file, or in a process stopped under gdb
// (introspect/gdb/weft-gdb.py; docs/dump.md, "Post mortem").
//
// A core cannot answer weft-dump, and a release build has no debug
// information to describe weft's classes to gdb. So libweft exports two
// symbols of its own, with C names that a gdb script finds by name alone:
//
//   weft_gdb_layout      a table of {name, value} pairs: the offsets and
//                        sizes of the fields the script reads, and the
//                        layout of a saved context, ended by {null, 0}
//   weft_gdb_schedulers  the first of a list of every live scheduler, each
//                        entry pointing at its fiber registry's shards
//
// The script reads them as raw memory. Entries are found by name, so that a
// script and a libweft of another version agree on every field both know,
// and the script can name a field it needs and does not find.
#pragma once

#include <cstdint>

namespace weft::detail {

class SchedulerCore;

// One scheduler, as gdb finds it. Plain data, changed only under the list's
// lock (gdb_layout.cpp). gdb reads it in a stopped process or a core, so it
// may meet the list in the middle of a change; the script bounds its walk.
struct GdbScheduler {
  GdbScheduler* next;
  const SchedulerCore* core;
  const char* name;               // Config::name, alive as long as the scheduler
  const void* shards;             // FiberRegistry's shards ...
  std::uint64_t shard_count;      // ... and their count
  const void* const* workers;     // Worker*, by index, to name a fiber's worker
  std::uint64_t worker_count;     // in `workers`: Config::workers, then the spares
  std::uint64_t regular_workers;  // Config::workers, as weft-dump counts them
};

// Adds `core` to weft_gdb_schedulers. Called once it is fully built; a
// failure to allocate leaves it out, since gdb's view is never worth
// failing a service.
void list_for_gdb(SchedulerCore& core) noexcept;
// Takes `core` off the list; called once its fibers are gone, before its
// parts are destroyed.
void unlist_for_gdb(const SchedulerCore& core) noexcept;

}  // namespace weft::detail
