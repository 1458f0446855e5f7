#include "dump_top.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <memory>
#include <unordered_map>
#include <utility>
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

// The columns fmt pads `text` as taking (a wide character takes two, and
// a byte at most one): asked of fmt, so that clip() and the padding of the
// rows agree.
std::size_t display_width(std::string_view text) {
  return text.size() - (fmt::formatted_size("{:<{}}", text, text.size()) - text.size());
}

// The longest prefix of `text` at most `width` columns wide, cut between
// UTF-8 characters, never inside one.
std::string clip(std::string_view text, std::size_t width) {
  if (text.size() <= width) return std::string(text);
  std::size_t end = 0;
  for (std::size_t next = 1; next <= text.size(); ++next) {
    if (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xc0) == 0x80) continue;
    if (display_width(text.substr(0, next)) > width) break;
    end = next;
  }
  return std::string(text.substr(0, end));
}

double rate(std::uint64_t now, std::uint64_t before, double seconds) {
  return now >= before && seconds > 0 ? static_cast<double>(now - before) / seconds : 0;
}

// What a frame is written into: the text, and the terminal rows it has
// left; every line written takes one.
class Frame {
 public:
  explicit Frame(int rows) : left_(std::max(rows, 8)) {}
  template <class... Args>
  void line(fmt::format_string<Args...> format, Args&&... args) {
    fmt::format_to(std::back_inserter(text_), format, std::forward<Args>(args)...);
    text_ += '\n';
    --left_;
  }
  void blank() { line(""); }
  // Appends to the line being built, which line("") then ends.
  template <class... Args>
  void part(fmt::format_string<Args...> format, Args&&... args) {
    fmt::format_to(std::back_inserter(text_), format, std::forward<Args>(args)...);
  }
  std::string& text() { return text_; }
  int left() const { return left_; }

 private:
  std::string text_;
  int left_;
};

void frame_header(Frame& frame, const ProcessSnapshot& current, double seconds) {
  std::string time = detail::dump::iso_time(current);
  std::replace(time.begin(), time.end(), 'T', ' ');
  std::uint64_t fibers = 0;
  for (const SchedulerSnapshot& s : current.schedulers) fibers += s.fiber_count;
  frame.line("weft-dump --top: pid {} ({})  {}  {} schedulers, {} fibers  rates per second over {:.1f} s  (q quits)",
             current.pid, printable(current.name), time, current.schedulers.size(), fibers, seconds);
}

// Pools first: they are what a service owner names and watches.
void pool_rows(Frame& frame, const ProcessSnapshot& previous, const ProcessSnapshot& current, double seconds) {
  if (current.pools.empty()) return;
  frame.blank();
  frame.line("{:<20} {:<7} {:>5} {:>7} {:>7} {:>9}  {:<22} {}", "POOL", "MODE", "SIZE", "QUEUED", "RUNNING", "DONE/s",
             "WAIT_ms(p50/p99/max)", "RUN_ms(p50/p99/max)");
  const auto ms3 = [](const LatencySummary& l) {
    return fmt::format("{:.1f}/{:.1f}/{:.1f}", l.p50_us / 1000, l.p99_us / 1000, l.max_us / 1000);
  };
  for (const PoolSnapshot& p : current.pools) {
    if (frame.left() <= 3) break;
    std::uint64_t before_completed = 0;
    for (const PoolSnapshot& o : previous.pools)
      if (o.name == p.name) before_completed = o.completed;
    frame.line("{:<20} {:<7} {:>5} {:>7} {:>7} {:>9.1f}  {:<22} {}", clip(printable(p.name), 20), clip(p.mode, 7),
               p.size, p.queued, p.running, rate(p.completed, before_completed, seconds), ms3(p.wait), ms3(p.run));
  }
}

struct WorkerRow {
  const WorkerSnapshot* w;
  double run, steal, park, preempt;
};

// Busiest first.
std::vector<WorkerRow> worker_rates(const SchedulerSnapshot& s, const SchedulerSnapshot* old, double seconds) {
  std::vector<WorkerRow> rows;
  for (const WorkerSnapshot& w : s.workers) {
    const WorkerSnapshot zero;
    const WorkerSnapshot* p = &zero;
    if (old != nullptr)
      for (const WorkerSnapshot& o : old->workers)
        if (o.index == w.index) p = &o;
    rows.push_back({&w, rate(w.fibers_run, p->fibers_run, seconds), rate(w.steals, p->steals, seconds),
                    rate(w.parks, p->parks, seconds), rate(w.preempts, p->preempts, seconds)});
  }
  std::stable_sort(rows.begin(), rows.end(), [](const WorkerRow& a, const WorkerRow& b) {
    return a.run + a.steal + a.park + a.preempt > b.run + b.steal + b.park + b.preempt;
  });
  return rows;
}

void worker_rows(Frame& frame, const SchedulerSnapshot& s, const SchedulerSnapshot* old, double seconds) {
  frame.blank();
  frame.line(
      "Scheduler \"{}\": {} workers, {} fibers, global queue {}, sched latency p50/p99/max {:.1f}/{:.1f}/{:.1f} us",
      printable(s.name), s.workers.size(), s.fiber_count, s.global_queue, s.sched_latency.p50_us,
      s.sched_latency.p99_us, s.sched_latency.max_us);
  frame.line("{:>6} {:>8} {:<9} {:>6} {:>10} {:>10} {:>10} {:>10}", "WORKER", "TID", "STATE", "QUEUE", "RUN/s",
             "STEALS/s", "PARKS/s", "PREEMPTS/s");
  for (const WorkerRow& r : worker_rates(s, old, seconds)) {
    if (frame.left() <= 3) break;
    frame.line("{:>6} {:>8} {:<9} {:>6} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f}{}", r.w->index, r.w->os_thread_id,
               printable(r.w->state), r.w->queue_length, r.run, r.steal, r.park, r.preempt,
               r.w->stuck ? "  STUCK" : "");
  }
}

struct FiberRow {
  const FiberSnapshot* f;
  double active, steal, park, preempt;
};

using FibersById = std::unordered_map<std::uint64_t, const FiberSnapshot*>;

// By ACTIVE/s, then by the other rates' sum, then by id; a fiber spawned
// since the previous dump is counted from zero.
std::vector<FiberRow> fiber_rates(const SchedulerSnapshot& s, const FibersById& before, double seconds) {
  std::vector<FiberRow> rows;
  rows.reserve(s.fibers.size());
  for (const FiberSnapshot& f : s.fibers) {
    const auto it = before.find(f.id);
    const FiberSnapshot zero;
    const FiberSnapshot* p = it == before.end() ? &zero : it->second;
    rows.push_back({&f, rate(f.counts.active, p->counts.active, seconds),
                    rate(f.counts.steal, p->counts.steal, seconds), rate(f.counts.park, p->counts.park, seconds),
                    rate(f.counts.preempt, p->counts.preempt, seconds)});
  }
  std::sort(rows.begin(), rows.end(), [](const FiberRow& a, const FiberRow& b) {
    if (a.active != b.active) return a.active > b.active;
    const double ra = a.steal + a.park + a.preempt, rb = b.steal + b.park + b.preempt;
    if (ra != rb) return ra > rb;
    return a.f->id < b.f->id;
  });
  return rows;
}

// A parked fiber's WAIT column: "weft::BlockingQueue (take) 22.4 s".
std::string wait_column(const FiberSnapshot& f) {
  if (f.wait_kind.empty() || f.park_state != -1) return {};
  std::string out = printable(f.wait_kind);
  if (!f.wait_operation.empty()) out += " (" + printable(f.wait_operation) + ")";
  return out + " " + format_duration_ms(f.waiting_ms);
}

// As many fiber rows as the screen has lines left, then "... N more".
void fiber_rows(Frame& frame, const SchedulerSnapshot& s, const FibersById& before, double seconds) {
  const std::vector<FiberRow> rows = fiber_rates(s, before, seconds);
  frame.blank();
  frame.line("{:>8} {:<20} {:<8} {:>10} {:>10} {:>10} {:>10}  {}", "FIBER", "NAME", "STATE", "ACTIVE/s", "STEAL/s",
             "PARK/s", "PREEMPT/s", "WAIT");
  std::size_t shown = 0;
  for (const FiberRow& r : rows) {
    if (frame.left() <= 1 && shown + 1 < rows.size()) break;
    frame.line("{:>8} {:<20} {:<8} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f}  {}", fmt::format("#{}", r.f->id),
               clip(printable(r.f->name), 20), clip(printable(r.f->state), 8), r.active, r.steal, r.park, r.preempt,
               wait_column(*r.f));
    ++shown;
  }
  if (shown < rows.size()) frame.line("   ... {} more fibers", rows.size() - shown);
}

}  // namespace

std::string render_top_frame(const ProcessSnapshot& previous, const ProcessSnapshot& current, double seconds,
                             int rows) {
  FibersById before;
  for (const SchedulerSnapshot& s : previous.schedulers)
    for (const FiberSnapshot& f : s.fibers) before.emplace(f.id, &f);
  Frame frame(rows);
  frame_header(frame, current, seconds);
  pool_rows(frame, previous, current, seconds);
  for (std::size_t i = 0; i < current.schedulers.size(); ++i) {
    const SchedulerSnapshot& s = current.schedulers[i];
    // The same scheduler in the previous dump: at the same place, by name.
    const SchedulerSnapshot* old =
        i < previous.schedulers.size() && previous.schedulers[i].name == s.name ? &previous.schedulers[i] : nullptr;
    worker_rows(frame, s, old, seconds);
    fiber_rows(frame, s, before, seconds);
  }
  return std::move(frame.text());
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
