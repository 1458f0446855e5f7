// `weft-dump --trace`: a timeline of this process's schedulers as Chrome's
// Trace Event JSON, checked against the format: a traceEvents array, ph,
// ts, pid and tid on every event, B/E pairs that match on each track, flow
// arrows that start somewhere.
#include <unistd.h>
#include <weft/weft.h>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dump_support.h"
#include "sched/trace.h"

namespace weft {
namespace {

using namespace dump_test;

TEST(DumpTrace, RecordsRunsParksWakesAsChromeTraceEvents) {
  Config config = test::config_with(2);
  config.name = "traced";
  Scheduler sched{config};
  BlockingQueue<int> pings(1), pongs(1);
  std::atomic<bool> stop{false};
  // A PingPong, until the trace is over (bounded: 60 s).
  Fiber ping = sched.spawn({.name = "ping"}, [&] {
    const auto give_up = std::chrono::steady_clock::now() + 60s;
    for (int i = 0; !stop.load() && std::chrono::steady_clock::now() < give_up; ++i) {
      pings.put(i);
      pongs.take();
      // A few thousand round trips a second: enough to see, little to write.
      this_fiber::sleep_for(200us);
    }
    pings.close();
  });
  Fiber pong = sched.spawn({.name = "pong"}, [&] {
    try {
      for (;;) pongs.put(pings.take());
    } catch (const QueueClosed&) {
    }
  });
  const CliResult result = run_cli({std::to_string(::getpid()), "--trace", "0.5"});
  stop.store(true);
  ping.join();
  pong.join();
  EXPECT_FALSE(detail::tracing()) << "off once the trace is over";
  ASSERT_EQ(result.exit_code, 0) << result.err;

  Json trace;
  ASSERT_NO_THROW(trace = Json::parse(result.out)) << result.out.substr(0, 2000);
  ASSERT_TRUE(trace.is_object());
  ASSERT_TRUE(trace["traceEvents"].is_array());
  const Json& events = trace["traceEvents"];
  ASSERT_GT(events.size(), 10u);
  std::map<std::pair<int, int>, std::vector<std::string>> open;  // (pid, tid) -> B names not yet ended
  std::map<int, std::string> track_names;
  std::set<std::uint64_t> flow_starts;
  std::vector<std::uint64_t> flow_ends;
  int runs = 0, parks_on_queue = 0, wakes = 0;
  for (const Json& e : events) {
    ASSERT_TRUE(e.contains("ph") && e.contains("ts") && e.contains("pid") && e.contains("tid")) << e;
    EXPECT_TRUE(e["ts"].is_number()) << e;
    EXPECT_GE(e["ts"].get<double>(), 0.0) << e;
    EXPECT_EQ(e["pid"].get<int>(), ::getpid()) << e;
    const std::string ph = e["ph"].get<std::string>();
    const auto track = std::make_pair(e["pid"].get<int>(), e["tid"].get<int>());
    if (ph == "B") {
      open[track].push_back(e["name"].get<std::string>());
      if (e["name"].get<std::string>().find("\"ping\" #") == 0) ++runs;
    } else if (ph == "E") {
      ASSERT_FALSE(open[track].empty()) << "an E without its B: " << e;
      EXPECT_EQ(open[track].back(), e["name"].get<std::string>()) << e;
      open[track].pop_back();
      const Json& args = e["args"];
      EXPECT_TRUE(args.contains("left")) << e;
      if (args.contains("on") && args["on"].get<std::string>() == "weft::BlockingQueue (take)") ++parks_on_queue;
    } else if (ph == "s") {
      flow_starts.insert(e["id"].get<std::uint64_t>());
    } else if (ph == "f") {
      flow_ends.push_back(e["id"].get<std::uint64_t>());
    } else if (ph == "i") {
      if (e["name"].get<std::string>().rfind("wake ", 0) == 0) ++wakes;
    } else if (ph == "M" && e["name"] == "thread_name") {
      track_names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
    }
  }
  for (const auto& [track, names] : open) EXPECT_TRUE(names.empty()) << "a B without its E on tid " << track.second;
  EXPECT_GT(runs, 10) << "ping ran many times in half a second";
  EXPECT_GT(parks_on_queue, 10);
  EXPECT_GT(wakes, 10);
  EXPECT_GT(flow_ends.size(), 10u);
  for (const std::uint64_t id : flow_ends) EXPECT_EQ(flow_starts.count(id), 1u) << "an arrow from nowhere: " << id;
  // One track per worker, named after it.
  int worker_tracks = 0;
  for (const auto& [tid, name] : track_names) worker_tracks += name.rfind("traced/", 0) == 0;
  EXPECT_GE(worker_tracks, 1);
  EXPECT_LE(worker_tracks, 2 + 16) << "workers and spares";
  EXPECT_EQ(trace["otherData"]["weft_trace"].get<int>(), 1);
}

TEST(DumpTrace, OneAtATimeAndBadLengthsAreRefused) {
  Scheduler sched{test::config_with(1)};
  const CliResult zero = run_cli({std::to_string(::getpid()), "--trace", "0"});
  EXPECT_EQ(zero.exit_code, 2) << zero.err;
  // A second trace while one records is refused, naming why.
  std::atomic<bool> first_done{false};
  CliResult first;
  std::thread one([&] {
    first = run_cli({std::to_string(::getpid()), "--trace", "2"});
    first_done.store(true);
  });
  std::string refusal;
  while (!first_done.load() && refusal.empty()) {
    const CliResult second = run_cli({std::to_string(::getpid()), "--trace", "0.05"});
    if (second.exit_code == 1) refusal = second.err;
    std::this_thread::sleep_for(200ms);
  }
  one.join();
  // The long one is refused only if it began inside a short one's 50 ms.
  if (first.exit_code != 0) refusal = first.err;
  EXPECT_NE(refusal.find("a trace is being recorded already"), std::string::npos) << refusal;
}

}  // namespace
}  // namespace weft
