#include "dump_top.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <unordered_map>
#include <vector>

#include "dump_client.h"

namespace weft::tools {
namespace {

using Clock = std::chrono::steady_clock;

// The terminal as it was, restored on every way out (also from a signal:
// tcsetattr is async-signal-safe).
struct termios g_saved_termios;
volatile sig_atomic_t g_raw = 0;

void restore_terminal() {
  if (g_raw) {
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &g_saved_termios);
    g_raw = 0;
  }
}

void on_signal(int signal) {
  restore_terminal();
  constexpr char kShowCursor[] = "\x1b[?25h\n";
  [[maybe_unused]] const ssize_t n = ::write(STDOUT_FILENO, kShowCursor, sizeof(kShowCursor) - 1);
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

class RawTerminal {
 public:
  RawTerminal() {
    if (::tcgetattr(STDIN_FILENO, &g_saved_termios) != 0) return;
    struct termios raw = g_saved_termios;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    struct sigaction action {};
    action.sa_handler = on_signal;
    ::sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, nullptr);
    ::sigaction(SIGTERM, &action, nullptr);
    if (::tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0) g_raw = 1;
    std::fputs("\x1b[?25l", stdout);  // hide the cursor
  }
  ~RawTerminal() {
    restore_terminal();
    std::fputs("\x1b[?25h", stdout);
    std::fflush(stdout);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
};

int terminal_rows() {
  struct winsize size {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_row > 0) return size.ws_row;
  return 24;
}

// Waits until `until`; true if the user pressed q meanwhile.
bool wait_for_quit(Clock::time_point until, bool interactive) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return false;
    if (!interactive) {
      ::poll(nullptr, 0, static_cast<int>(left));
      continue;
    }
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char c = 0;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n == 0) {  // stdin closed: keys cannot come any more
      ::poll(nullptr, 0, static_cast<int>(left));
      return false;
    }
    if (n == 1 && (c == 'q' || c == 'Q')) return true;
  }
}

template <class... Args>
void append(std::string& out, const char* format, Args... args) {
  char buffer[512];
  const int n = std::snprintf(buffer, sizeof(buffer), format, args...);
  if (n > 0) out.append(buffer, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof(buffer) - 1));
}

std::string clip(std::string_view text, std::size_t width) { return std::string(text.substr(0, width)); }

double rate(std::uint64_t now, std::uint64_t before, double seconds) {
  return now >= before && seconds > 0 ? static_cast<double>(now - before) / seconds : 0;
}

struct WorkerRow {
  const WorkerSnapshot* w;
  double run, steal, park, preempt;
};

struct FiberRow {
  const FiberSnapshot* f;
  double active, steal, park, preempt;
};

}  // namespace

std::string render_top_frame(const ProcessSnapshot& previous, const ProcessSnapshot& current, double seconds,
                             int rows) {
  std::unordered_map<std::uint64_t, const FiberSnapshot*> before;
  for (const SchedulerSnapshot& s : previous.schedulers)
    for (const FiberSnapshot& f : s.fibers) before.emplace(f.id, &f);
  std::string out;
  int left = std::max(rows, 8);
  auto line = [&] { --left; };
  std::string time = detail::dump::iso_time(current);
  std::replace(time.begin(), time.end(), 'T', ' ');
  std::uint64_t fibers = 0;
  for (const SchedulerSnapshot& s : current.schedulers) fibers += s.fiber_count;
  append(out,
         "weft-dump --top: pid %lld (%s)  %s  %llu schedulers, %llu fibers  rates per second over %.1f s  (q quits)\n",
         static_cast<long long>(current.pid), printable(current.name).c_str(), time.c_str(),
         static_cast<unsigned long long>(current.schedulers.size()), static_cast<unsigned long long>(fibers), seconds);
  line();
  if (!current.pools.empty()) {
    // Pools first: they are what a service owner names and watches.
    append(out, "\n%-20s %-7s %5s %7s %7s %9s  %-22s %s\n", "POOL", "MODE", "SIZE", "QUEUED", "RUNNING", "DONE/s",
           "WAIT_ms(p50/p99/max)", "RUN_ms(p50/p99/max)");
    line(), line();
    for (const PoolSnapshot& p : current.pools) {
      if (left <= 3) break;
      std::uint64_t before_completed = 0;
      for (const PoolSnapshot& o : previous.pools)
        if (o.name == p.name) before_completed = o.completed;
      const auto ms3 = [](const LatencySummary& l) {
        char buffer[64];
        std::snprintf(buffer, sizeof(buffer), "%.1f/%.1f/%.1f", l.p50_us / 1000, l.p99_us / 1000, l.max_us / 1000);
        return std::string(buffer);
      };
      append(out, "%-20.20s %-7.7s %5llu %7llu %7llu %9.1f  %-22s %s\n", clip(p.name, 20).c_str(),
             clip(p.mode, 7).c_str(), static_cast<unsigned long long>(p.size),
             static_cast<unsigned long long>(p.queued), static_cast<unsigned long long>(p.running),
             rate(p.completed, before_completed, seconds), ms3(p.wait).c_str(), ms3(p.run).c_str());
      line();
    }
  }
  for (std::size_t si = 0; si < current.schedulers.size(); ++si) {
    const SchedulerSnapshot& s = current.schedulers[si];
    const SchedulerSnapshot* old =
        si < previous.schedulers.size() && previous.schedulers[si].name == s.name ? &previous.schedulers[si] : nullptr;
    std::vector<WorkerRow> workers;
    for (const WorkerSnapshot& w : s.workers) {
      const WorkerSnapshot* p = nullptr;
      if (old != nullptr)
        for (const WorkerSnapshot& o : old->workers)
          if (o.index == w.index) p = &o;
      const WorkerSnapshot zero;
      if (p == nullptr) p = &zero;
      workers.push_back({&w, rate(w.fibers_run, p->fibers_run, seconds), rate(w.steals, p->steals, seconds),
                         rate(w.parks, p->parks, seconds), rate(w.preempts, p->preempts, seconds)});
    }
    std::stable_sort(workers.begin(), workers.end(), [](const WorkerRow& a, const WorkerRow& b) {
      return a.run + a.steal + a.park + a.preempt > b.run + b.steal + b.park + b.preempt;
    });
    append(out,
           "\nScheduler \"%s\": %llu workers, %llu fibers, global queue %llu, sched latency p50/p99/max %.1f/%.1f/%.1f "
           "us\n",
           printable(s.name).c_str(), static_cast<unsigned long long>(s.workers.size()),
           static_cast<unsigned long long>(s.fiber_count), static_cast<unsigned long long>(s.global_queue),
           s.sched_latency.p50_us, s.sched_latency.p99_us, s.sched_latency.max_us);
    append(out, "%6s %8s %-9s %6s %10s %10s %10s %10s\n", "WORKER", "TID", "STATE", "QUEUE", "RUN/s", "STEALS/s",
           "PARKS/s", "PREEMPTS/s");
    line(), line(), line();
    for (const WorkerRow& r : workers) {
      if (left <= 3) break;
      append(out, "%6llu %8lld %-9s %6llu %10.1f %10.1f %10.1f %10.1f%s\n", static_cast<unsigned long long>(r.w->index),
             static_cast<long long>(r.w->os_thread_id), printable(r.w->state).c_str(),
             static_cast<unsigned long long>(r.w->queue_length), r.run, r.steal, r.park, r.preempt,
             r.w->stuck ? "  STUCK" : "");
      line();
    }
    std::vector<FiberRow> rows_of_fibers;
    rows_of_fibers.reserve(s.fibers.size());
    for (const FiberSnapshot& f : s.fibers) {
      const auto it = before.find(f.id);
      const FiberSnapshot zero;
      const FiberSnapshot* p = it == before.end() ? &zero : it->second;  // new: counted from its spawn
      rows_of_fibers.push_back(
          {&f, rate(f.counts.active, p->counts.active, seconds), rate(f.counts.steal, p->counts.steal, seconds),
           rate(f.counts.park, p->counts.park, seconds), rate(f.counts.preempt, p->counts.preempt, seconds)});
    }
    std::sort(rows_of_fibers.begin(), rows_of_fibers.end(), [](const FiberRow& a, const FiberRow& b) {
      if (a.active != b.active) return a.active > b.active;
      const double ra = a.steal + a.park + a.preempt, rb = b.steal + b.park + b.preempt;
      if (ra != rb) return ra > rb;
      return a.f->id < b.f->id;
    });
    append(out, "\n%8s %-20s %-8s %10s %10s %10s %10s  %s\n", "FIBER", "NAME", "STATE", "ACTIVE/s", "STEAL/s", "PARK/s",
           "PREEMPT/s", "WAIT");
    line(), line();
    std::size_t shown = 0;
    for (const FiberRow& r : rows_of_fibers) {
      if (left <= 1 && shown + 1 < rows_of_fibers.size()) break;
      char id[24];
      std::snprintf(id, sizeof(id), "#%llu", static_cast<unsigned long long>(r.f->id));
      append(out, "%8s %-20.20s %-8.8s %10.1f %10.1f %10.1f %10.1f  ", id, clip(printable(r.f->name), 20).c_str(),
             clip(printable(r.f->state), 8).c_str(), r.active, r.steal, r.park, r.preempt);
      if (!r.f->wait_kind.empty() && r.f->park_state == -1) {
        append_printable(out, r.f->wait_kind);
        if (!r.f->wait_operation.empty()) {
          out.append(" (");
          append_printable(out, r.f->wait_operation);
          out.append(")");
        }
        out.append(" ");
        out.append(format_duration_ms(r.f->waiting_ms));
      }
      out.append("\n");
      line();
      ++shown;
    }
    if (shown < rows_of_fibers.size()) {
      append(out, "   ... %llu more fibers\n", static_cast<unsigned long long>(rows_of_fibers.size() - shown));
      line();
    }
  }
  return out;
}

int run_top(pid_t pid, const TopOptions& options) {
  const bool interactive = ::isatty(STDIN_FILENO) && ::isatty(STDOUT_FILENO);
  std::unique_ptr<RawTerminal> terminal;
  if (interactive) terminal = std::make_unique<RawTerminal>();
  ProcessSnapshot previous = request_dump(pid, "dump", options.timeout).snapshot;
  auto previous_at = Clock::now();
  for (long frame = 0; options.iterations == 0 || frame < options.iterations; ++frame) {
    if (wait_for_quit(previous_at + options.interval, interactive)) break;
    ProcessSnapshot current = request_dump(pid, "dump", options.timeout).snapshot;
    const auto now = Clock::now();
    // The server's clock says when each snapshot was taken; ours, when it
    // arrived, is the fallback.
    double seconds = static_cast<double>(current.unix_time_ms - previous.unix_time_ms) / 1000;
    if (seconds <= 0) seconds = std::chrono::duration<double>(now - previous_at).count();
    std::string text = render_top_frame(previous, current, seconds, interactive ? terminal_rows() : 24);
    if (interactive) {
      // Clear and draw in one write; the last line has no newline so that
      // the screen does not scroll.
      if (!text.empty() && text.back() == '\n') text.pop_back();
      text = "\x1b[H\x1b[2J" + text;
    } else if (frame > 0) {
      text = "\n" + text;
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    previous = std::move(current);
    previous_at = now;
  }
  if (interactive) std::fputs("\n", stdout);
  return 0;
}

}  // namespace weft::tools
