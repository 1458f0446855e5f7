// `weft-dump --metrics`: the OpenMetrics text, parsed by a standard parser
// (python3-prometheus-client's), with the values the process has.
#include <unistd.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dump_support.h"

namespace weft {
namespace {

using namespace dump_test;

// What prometheus_client's OpenMetrics parser makes of `text`: one line per
// sample, "<type> <sample name> <label=value,...> <value>", or the parser's
// error (exit code 1). Debian's python3, whose dist-packages hold the
// parser (scripts/install-deps), not whichever python3 PATH finds first.
constexpr const char* kParser = R"(
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for family in text_string_to_metric_families(open(sys.argv[1]).read()):
    for s in family.samples:
        labels = ",".join(k + "=" + v for k, v in sorted(s.labels.items()))
        print(family.type, s.name, labels or "-", repr(float(s.value)))
)";

struct Parsed {
  int exit_code = -1;
  std::string error;
  std::map<std::string, double> samples;  // "<type> <name> <labels>" -> value
};

Parsed parse_openmetrics(const std::string& text) {
  TempDirectory dir;
  const std::string input = dir.path + "/metrics.txt", script = dir.path + "/parse.py";
  std::FILE* f = std::fopen(input.c_str(), "w");
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  f = std::fopen(script.c_str(), "w");
  std::fputs(kParser, f);
  std::fclose(f);
  const std::string out = dir.path + "/out", err = dir.path + "/err";
  Parsed parsed;
  const int status = std::system(("/usr/bin/python3 " + script + " " + input + " >" + out + " 2>" + err).c_str());
  parsed.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  parsed.error = read_file(err);
  std::istringstream lines(read_file(out));
  for (std::string type, name, labels, value; lines >> type >> name >> labels >> value;)
    parsed.samples[type + " " + name + " " + labels] = std::stod(value);
  return parsed;
}

class DumpMetrics : public ReadyChildTest {
 protected:
  DumpMetrics() : ReadyChildTest(WEFT_POOL_DUMP_CHILD) {}
};

TEST_F(DumpMetrics, OpenMetricsTextThatAStandardParserReads) {
  const CliResult result = run_cli({pid(), "--metrics"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  const std::string& text = result.out;
  EXPECT_EQ(text.substr(text.size() - 6), "# EOF\n") << text;
  const Parsed parsed = parse_openmetrics(text);
  ASSERT_EQ(parsed.exit_code, 0) << parsed.error << "\n" << text;
  const auto value = [&](const std::string& key) {
    const auto it = parsed.samples.find(key);
    EXPECT_NE(it, parsed.samples.end()) << key << " in\n" << text;
    return it == parsed.samples.end() ? -1.0 : it->second;
  };
  // Fibers by state: the fiber pool's runners (up to 4, started on demand:
  // one runs the blocked task, parked on a latch; the others wait for
  // work), all parked.
  const std::string sched = "scheduler=weft-default";
  EXPECT_GE(value("gauge weft_fibers " + sched + ",state=parked"), 1);
  EXPECT_LE(value("gauge weft_fibers " + sched + ",state=parked"), 4);
  EXPECT_EQ(value("gauge weft_fibers " + sched + ",state=runnable"), 0);
  EXPECT_EQ(value("gauge weft_fibers " + sched + ",state=running"), 0);
  // Per-worker counters, with a worker label, as _total.
  double runs = 0, parks = 0;
  for (int w = 0;; ++w) {
    const std::string key = "counter weft_worker_runs_total " + sched + ",worker=" + std::to_string(w);
    if (parsed.samples.count(key) == 0) break;
    runs += parsed.samples.at(key);
    parks += value("counter weft_worker_parks_total " + sched + ",worker=" + std::to_string(w));
    value("counter weft_worker_steals_total " + sched + ",worker=" + std::to_string(w));
    value("counter weft_worker_preempts_total " + sched + ",worker=" + std::to_string(w));
    value("counter weft_worker_handoffs_total " + sched + ",worker=" + std::to_string(w));
  }
  EXPECT_GE(runs, 100) << "100 tasks slept on the fiber pool";
  EXPECT_GE(parks, 100);
  EXPECT_GE(value("gauge weft_spare_threads " + sched + ",state=started"), 0);
  EXPECT_GE(value("counter weft_poller_polls_total " + sched), 0);
  EXPECT_GE(value("counter weft_poller_events_total " + sched), 0);
  // Pools: counts, and the latencies as summaries in seconds.
  for (const std::string pool : {"mode=fibers,pool=rpc-handler", "mode=threads,pool=db-writer"}) {
    EXPECT_EQ(value("gauge weft_pool_running_tasks " + pool), 1) << pool;
    EXPECT_EQ(value("gauge weft_pool_queued_tasks " + pool), 0) << pool;
    EXPECT_EQ(value("counter weft_pool_completed_tasks_total " + pool), 100) << pool;
    EXPECT_EQ(value("counter weft_pool_failed_tasks_total " + pool), 0) << pool;
    EXPECT_EQ(value("summary weft_pool_run_seconds_count " + pool), 100) << pool;
    EXPECT_EQ(value("summary weft_pool_wait_seconds_count " + pool), 101) << pool << ": the running one started";
    EXPECT_LE(value("summary weft_pool_run_seconds " + pool + ",quantile=0.5"),
              value("summary weft_pool_run_seconds " + pool + ",quantile=0.99"));
    EXPECT_LE(value("summary weft_pool_run_seconds " + pool + ",quantile=0.99"),
              value("summary weft_pool_run_seconds " + pool + ",quantile=1"));
  }
  // The fiber pool's tasks each slept 100 us: in seconds, at least that.
  EXPECT_GE(value("summary weft_pool_run_seconds mode=fibers,pool=rpc-handler,quantile=0.5"), 100e-6);
  EXPECT_GE(value("summary weft_pool_run_seconds_sum mode=fibers,pool=rpc-handler"), 100 * 100e-6);
}

// A bad document fails the parser (so the test above can fail).
TEST(DumpMetricsParser, RefusesWhatIsNotOpenMetrics) {
  EXPECT_NE(parse_openmetrics("# TYPE x counter\nx 1\n").exit_code, 0) << "a counter sample without _total, no # EOF";
}

}  // namespace
}  // namespace weft
