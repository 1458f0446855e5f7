// dump_codec: what weft-dump's wire format costs for a big process: a
// ProcessSnapshot of N fibers (default 100,000), each parked with a stack of
// kFrames addresses drawn from a few call sites, encoded as the server does
// and decoded as the CLI does, median of --runs runs (docs/benchmarks.md).
// Times are this thread's CPU time: on a loaded machine wall time mostly
// measures the neighbours.
//
//   dump_codec                  # 100,000 fibers, 5 runs
//   dump_codec --fibers 1000 --runs 3
//   dump_codec --runs 1 --save dump.json   # the document too, to try other readers on
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "dump_text.h"
#include "introspect/dump_fields.h"
#include "introspect/dump_format.h"

namespace {

constexpr int kFrames = 6;
constexpr int kSites = 40;

weft::ProcessSnapshot make_snapshot(std::size_t fibers) {
  weft::ProcessSnapshot process;
  process.pid = 4242;
  process.name = "dump_codec";
  process.unix_time_ms = 1'750'000'000'000;
  weft::SchedulerSnapshot s;
  s.name = "bench";
  for (unsigned i = 0; i < 4; ++i) {
    weft::WorkerSnapshot w;
    w.index = i;
    w.os_thread_id = 1000 + static_cast<int>(i);
    w.state = "sleeping";
    w.fibers_run = 123456789;
    s.workers.push_back(w);
  }
  for (std::size_t i = 0; i < fibers; ++i) {
    weft::FiberSnapshot f;
    f.id = i + 1;
    f.address = reinterpret_cast<const void*>(0x7f0000000000 + i * 4096);
    f.name = "worker-" + std::to_string(i);
    f.state = "parked";
    f.park_state = -1;
    f.worker = static_cast<int>(i % 4);
    f.counts = {i * 3, i % 7, 0, i % 5, i * 2};
    f.wait_kind = "weft::BlockingQueue";
    f.wait_object = reinterpret_cast<const void*>(0x5500000000 + i * 64);
    f.wait_operation = "take";
    f.waiting_ms = 1234.5 + static_cast<double>(i % 1000);
    for (int k = 0; k < kFrames; ++k)
      f.stack.push_back(0x555555554000 +
                        static_cast<std::uintptr_t>(((i + static_cast<std::size_t>(k)) % kSites) * 64 + k));
    s.fibers.push_back(std::move(f));
  }
  s.fiber_count = fibers;
  for (const auto& f : s.fibers)
    for (const std::uintptr_t a : f.stack)
      process.symbols.try_emplace(
          a, weft::FrameSymbol{"weft::BlockingQueue<int>::take()", "/src/weft/include/weft/blocking_queue.h", 120,
                               "/usr/lib/libweft.so.0", a - 0x555555554000});
  process.schedulers.push_back(std::move(s));
  return process;
}

double cpu_ms() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t fibers = 100'000;
  int runs = 5;
  std::string save;
  CLI::App app{"dump_codec: weft-dump's wire format, encoded (server) and decoded (CLI), for a big snapshot",
               "dump_codec"};
  weft::bench::add_count(app, "--fibers", fibers, std::size_t{1}, std::size_t{10'000'000}, "fibers in the snapshot");
  weft::bench::add_count(app, "--runs", runs, 1, 1000, "encode and decode runs");
  app.add_option("--save", save, "also write the first run's encoded dump to this file");
  weft::bench::parse(app, argc, argv);
  const weft::ProcessSnapshot process = make_snapshot(fibers);
  std::vector<double> encode_ms, decode_ms;
  std::size_t bytes = 0;
  for (int r = 0; r < runs; ++r) {
    const double t0 = cpu_ms();
    std::string json;
    weft::detail::write_json(process, weft::detail::DumpDetail::full, [&](std::string_view piece) {
      json.append(piece);
      return true;
    });
    const double t1 = cpu_ms();
    const double t2 = cpu_ms();
    const weft::ProcessSnapshot dump = weft::tools::read_dump(json);
    const double t3 = cpu_ms();
    if (dump.schedulers.at(0).fibers.size() != fibers) return std::fprintf(stderr, "dump_codec: lost fibers\n"), 1;
    bytes = json.size();
    if (!save.empty() && r == 0) {
      if (std::FILE* file = std::fopen(save.c_str(), "w")) {
        std::fwrite(json.data(), 1, json.size(), file);
        std::fclose(file);
      }
    }
    encode_ms.push_back(t1 - t0);
    decode_ms.push_back(t3 - t2);
  }
  std::printf("{\"fibers\": %zu, \"bytes\": %zu, \"encode_ms\": %.1f, \"decode_ms\": %.1f, \"runs\": %d}\n", fibers,
              bytes, median(encode_ms), median(decode_ms), runs);
  return 0;
}
