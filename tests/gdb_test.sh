#!/usr/bin/env bash
# The gdb extension (introspect/gdb/weft-gdb.py) on tests/gdb_child.cpp's
# process, four ways: attached live with `gdb -p`; core files taken from it
# with the extension's weft-gcore and with gcore; the core file the kernel
# dumps when it is killed by SIGABRT.
# In each, `info weft-fibers` must list every fiber of both schedulers with
# its name, id, state and wait site (the primitives' addresses as the child
# printed them), and `weft-bt` must show each parked fiber's own function,
# unwound from its saved context and by the frame pointers.
#
# gcore cannot read a mapping that holds a guard page of Linux 6.13+
# (MADV_GUARD_INSTALL), as weft's stacks do, and writes zeros for it (it
# warns "Memory read failed for corefile section"). On such a kernel its
# core must still list every fiber, and weft-bt must say why it has no
# frames; weft-gcore's core and the kernel's must have them. The kernel's
# core is skipped when core_pattern sends cores elsewhere (a pipe to
# systemd-coredump or apport, or another directory).
#
# Also: that gdb auto-loads the script by the name it is installed under
# (introspect/gdb/meson.build), <scripts-directory>/<library's real path>-gdb.py.
#
# Usage: gdb_test.sh <gdb_child> <weft-gdb.py> <libweft.so.VERSION> [live-only]
# live-only: no cores, for a sanitizer's build. Its shadow memory took gcore
# minutes (ASan+UBSan here: past the test's limit) and ASan turns the
# kernel's core dumps off.
# Exit status 77 (meson's "skipped") when gdb is missing or may not ptrace.
set -uo pipefail

child_exe=$(realpath "$1")  # the child runs in its own directory
script=$(realpath "$2")
library=$(realpath "$3")
cores=${4:-cores}

for tool in gdb gcore; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (scripts/install-deps installs gdb)"
    exit 77
  fi
done
if [ "$(gdb -batch -nx -ex 'python print("python ok")' 2>&1)" != "python ok" ]; then
  echo "SKIP: this gdb has no Python, which the extension is written in"
  exit 77
fi

work=$(mktemp -d)
child=
cleanup() {
  if [ -n "$child" ]; then
    kill -KILL "$child" 2>/dev/null
    wait "$child" 2>/dev/null
  fi
  rm -rf "$work"  # the core file with it
}
trap cleanup EXIT

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# In $work, where a kernel core pattern without a directory puts the core,
# with cores allowed. One malloc arena: each thread's arena would add 64 MiB
# of reserved address space to every core.
(
  cd "$work" || exit 1
  ulimit -c "$(ulimit -Hc)"
  MALLOC_ARENA_MAX=1 exec "$child_exe"
) >"$work/child.out" 2>"$work/child.err" &
child=$!
for _ in $(seq 600); do
  grep -q '^ready' "$work/child.out" && break
  kill -0 "$child" 2>/dev/null || break
  sleep 0.1
done
ready=$(grep '^ready' "$work/child.out")
if [ -z "$ready" ]; then
  echo "FAIL: gdb_child did not get ready"
  cat "$work/child.err"
  exit 1
fi
echo "child: $ready"
# "ready pid=123 queue=0x... queue-taker=1 ..." -> $pid, $queue, ${ids[queue-taker]}
declare -A ids
for word in $ready; do
  case "$word" in
    pid=* | queue=* | mutex=*) declare "${word%%=*}=${word#*=}" ;;
    *=*) ids[${word%%=*}]=${word#*=} ;;
  esac
done

# One section per command, between markers, so that each check reads the
# output of its own command.
gdb_commands=(-batch -nx -ex "source $script"
  -ex 'echo ==info==\n' -ex 'info weft-fibers' -ex 'echo ==end==\n')
for name in queue-taker mutex-waiter sleeper joiner blocker other-taker; do
  gdb_commands+=(-ex "echo ==bt $name==\\n" -ex "weft-bt ${ids[$name]}" -ex 'echo ==end==\n')
done
gdb_commands+=(-ex 'echo ==fp queue-taker==\n' -ex "weft-bt -fp ${ids[queue-taker]}" -ex 'echo ==end==\n')

section() {  # file, marker
  sed -n "/^==$2==\$/,/^==end==\$/p" "$1"
}

# Checks the output of gdb_commands run in `mode` (live, gcore or kernel
# core); `stacks` is "lost" when the core holds zeros for the fibers' stacks.
check() {
  local out=$1 mode=$2 stacks=${3:-present} info
  if grep -Eq 'Python Exception|Error occurred in Python|Traceback' "$out"; then
    fail "$mode: the extension raised"
  fi
  info=$(section "$out" info)
  local fibers
  fibers=$(grep -c '^- Fiber ' <<<"$info")
  [ "$fibers" -eq 6 ] || fail "$mode: info weft-fibers lists $fibers fibers, not 6"
  grep -qxF 'Scheduler "gdb-child": 2 workers, 5 fibers' <<<"$info" || fail "$mode: no line for scheduler gdb-child"
  grep -qxF 'Scheduler "gdb-second": 1 workers, 1 fibers' <<<"$info" || fail "$mode: no line for scheduler gdb-second"

  local counters='active=[0-9]+ steal=[0-9]+ steal_fail=[0-9]+ preempt=[0-9]+ park=[0-9]+/-1'
  local since=' for [0-9.]+ m?s$'
  [ "$mode" != live ] && since=' for at least [0-9.]+ m?s$'
  expect_fiber() {  # name shown, id, wait site (a regex)
    grep -Eq "^- Fiber \[0x[0-9a-f]+\] \"$1\" #$2 $counters parked \(last ran on worker [0-9]\), waiting on $3$since" \
      <<<"$info" || fail "$mode: no parked line for fiber $1 #$2 waiting on $3"
  }
  expect_fiber queue-taker "${ids[queue-taker]}" "weft::BlockingQueue@$queue \(take\)"
  expect_fiber mutex-waiter "${ids[mutex-waiter]}" "weft::Mutex@$mutex \(lock\)"
  expect_fiber sleeper "${ids[sleeper]}" 'weft::this_fiber \(sleep\)'
  expect_fiber other-taker "${ids[other-taker]}" 'weft::BlockingQueue@0x[0-9a-f]+ \(take\)'
  # The joiner waits on the sleeper's control block, the address of its line.
  local sleeper_block
  sleeper_block=$(sed -nE "s/^- Fiber \[(0x[0-9a-f]+)\] \"sleeper\" .*/\1/p" <<<"$info")
  expect_fiber "fiber-${ids[joiner]}" "${ids[joiner]}" "weft::Fiber@${sleeper_block:-none} \(join\)"
  local running="running on worker [01] \[tid [0-9]+\]"
  grep -Eq "^- Fiber \[0x[0-9a-f]+\] \"blocker\" #${ids[blocker]} active=1 .* park=0/0 $running$" <<<"$info" ||
    fail "$mode: no running line for fiber blocker"

  expect_frames() {  # marker, function
    local bt
    bt=$(section "$out" "$1")
    if [ "$1" = 'bt blocker' ]; then
      grep -Eq "^\(running: the frames of worker [01]'s thread [0-9]+, LWP [0-9]+\)$" <<<"$bt" ||
        fail "$mode: weft-bt of the running fiber does not show its thread"
      [ "$stacks" = lost ] && return  # and the thread's stack, which is the fiber's, is zeros too
    elif [ "$stacks" = lost ]; then
      grep -Eq "^weft-bt: fiber #[0-9]+'s stack reads as zeros at 0x[0-9a-f]+: this core lacks it" <<<"$bt" ||
        fail "$mode: weft-bt of $1 does not say that the core lacks its stack"
      return
    fi
    # "#3  0x... in f(int) () from lib.so", or with debug information
    # "#3  0x... in f (x=1) at f.cpp:3" and, for an inlined frame, "#3  f (x=1) at f.cpp:3".
    grep -Eq "^#[0-9]+ +(0x[0-9a-f]+ in )?.*$2" <<<"$bt" || fail "$mode: weft-bt of $1 lacks a frame in $2"
    # Unwound to the fiber's first frame: weft's own (runtime/fcontext.h),
    # or Boost's with -DWEFT_BOOST_FCONTEXT.
    grep -Eq "^#[0-9]+ +0x[0-9a-f]+ in (weft_context_start|make_fcontext) " <<<"$bt" ||
      fail "$mode: weft-bt of $1 stops early"
    if grep -q '^Backtrace stopped' <<<"$bt"; then
      fail "$mode: weft-bt of $1: $(grep '^Backtrace stopped' <<<"$bt")"
    fi
  }
  expect_frames 'bt queue-taker' 'park_in_queue_take_for_gdb'
  expect_frames 'bt queue-taker' 'weft::detail::park ?\('
  expect_frames 'bt mutex-waiter' 'park_in_mutex_lock_for_gdb'
  expect_frames 'bt sleeper' 'park_in_sleep_for_gdb'
  expect_frames 'bt joiner' 'weft::Fiber::join'
  expect_frames 'bt other-taker' 'park_in_queue_take_for_gdb'
  expect_frames 'fp queue-taker' 'park_in_queue_take_for_gdb'
  expect_frames 'bt blocker' 'block_thread_for_gdb'
}

run_gdb() {  # mode, output file, gdb's target arguments...
  local mode=$1 out=$2
  shift 2
  timeout 120 gdb "${gdb_commands[@]}" "$@" >"$out" 2>&1
  echo "--- gdb, $mode:"
  cat "$out"
}

# Live, attached to the running child; and weft-gcore's core file of it.
gcore_command=()
[ "$cores" = cores ] && gcore_command=(-ex "weft-gcore $work/weft-core")
run_gdb live "$work/live.out" "${gcore_command[@]}" -p "$pid"
if grep -q 'ptrace: Operation not permitted' "$work/live.out"; then
  echo "SKIP: ptrace is not permitted here (gdb -p, gcore need it: run as root, or set kernel.yama.ptrace_scope=0)"
  exit 77
fi
check "$work/live.out" live

# Auto-loaded, not sourced: a scripts directory of our own, as
# <datadir>/gdb/auto-load is for an installed libweft.
mkdir -p "$work/auto-load$(dirname "$library")"
cp "$script" "$work/auto-load$library-gdb.py"
timeout 120 gdb -batch -nx -iex "set auto-load scripts-directory $work/auto-load" \
  -iex "set auto-load safe-path $work/auto-load" -ex 'info weft-fibers' -p "$pid" >"$work/auto-load.out" 2>&1
auto_loaded=$(grep -c '^- Fiber ' "$work/auto-load.out")
if [ "$auto_loaded" -ne 6 ]; then
  cat "$work/auto-load.out"
  fail "auto-loaded from $work/auto-load$library-gdb.py, info weft-fibers lists $auto_loaded fibers, not 6"
fi

check_cores() {
  # weft-gcore's, written by the live run above.
  if grep -q "^weft-gcore: $work/weft-core: wrote [0-9]* pages that gcore could not read" "$work/live.out"; then
    run_gdb weft-gcore "$work/weft-gcore.out" "$child_exe" "$work/weft-core"
    check "$work/weft-gcore.out" weft-gcore
    rm -f "$work/weft-core"
  else
    fail "weft-gcore did not write $work/weft-core"
  fi

  # gcore's.
  if ! gcore -o "$work/gcore" "$pid" >"$work/gcore.log" 2>&1 || [ ! -s "$work/gcore.$pid" ]; then
    cat "$work/gcore.log"
    fail "gcore could not write a core file"
  else
    local stacks=present
    if grep -q 'Memory read failed for corefile section' "$work/gcore.log"; then
      echo "note: gcore could not read some mappings (guard pages of Linux 6.13+?); expecting weft-bt to say so"
      grep 'Memory read failed' "$work/gcore.log"
      stacks=lost
    fi
    run_gdb gcore "$work/gcore.out" "$child_exe" "$work/gcore.$pid"
    check "$work/gcore.out" gcore "$stacks"
    rm -f "$work/gcore.$pid"
  fi

  # The kernel's, read once the process is gone.
  local pattern core
  pattern=$(cat /proc/sys/kernel/core_pattern)
  if [[ $pattern == \|* || $pattern == */* ]]; then
    echo "note: no kernel core: core_pattern is '$pattern', not a file in the working directory"
    return
  fi
  kill -ABRT "$child"
  wait "$child" 2>/dev/null  # returns once the core is written
  child=
  core=$(find "$work" -maxdepth 1 -name 'core*' -type f | head -n 1)
  if [ -z "$core" ]; then
    echo "note: no kernel core (pattern '$pattern', core limit $(ulimit -Hc)); not checked"
    return
  fi
  run_gdb 'kernel core' "$work/kernel.out" "$child_exe" "$core"
  check "$work/kernel.out" 'kernel core'
}

if [ "$cores" = cores ]; then
  check_cores
else
  echo "note: live only (a sanitizer's build): no core files checked"
fi

if [ "$failures" -ne 0 ]; then
  echo "gdb_test: $failures failures"
  exit 1
fi
echo "gdb_test: all checks passed"
