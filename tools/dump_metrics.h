// `weft-dump --metrics <pid>`: the process's counters in the OpenMetrics
// text format (Prometheus's exposition format, with `# EOF`), for a
// scraper, a sidecar or node_exporter's textfile collector. docs/dump.md
// lists the metrics.
#pragma once

#include <weft/snapshot.h>

#include <string>

namespace weft::tools {

// The document for `process` (a "metrics" answer: counts and workers).
std::string render_metrics(const ProcessSnapshot& process);

}  // namespace weft::tools
