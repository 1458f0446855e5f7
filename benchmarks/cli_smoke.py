#!/usr/bin/env python3
"""The benchmark programs' command lines (benchmarks/cli.h, CLI11), checked
by running them (meson test --suite bench-smoke cli):

  cli_smoke.py PROGRAM...

For every program: `--help` prints the generated help on stdout and exits
0, and an unknown option exits 2 naming it (or the required option that is
missing). For pingpong, which runs in a
moment: `--opt=value` and `--opt value` both work, a count is read in
decimal only, a value out of range or for another mode exits 2 with a
message naming the option, and a missing value exits 2. Every run is
bounded in time.
"""
import os
import subprocess
import sys

failures = []


def check(ok, message):
    print(("ok    " if ok else "FAIL  ") + message, flush=True)
    if not ok:
        failures.append(message)


def run(program, *args):
    return subprocess.run([program, *args], capture_output=True, text=True, timeout=60)


def main():
    programs = sys.argv[1:]
    if not programs:
        sys.exit("usage: cli_smoke.py PROGRAM...")
    for program in programs:
        name = os.path.basename(program)
        helped = run(program, "--help")
        check(helped.returncode == 0 and "Usage: " + name in helped.stdout and "--help" in helped.stdout,
              f"{name} --help: exit {helped.returncode}, help on stdout")
        # CLI11 names a missing required option (--port, --mode) first.
        bad = run(program, "--no-such-option")
        check(bad.returncode == 2 and ("--no-such-option" in bad.stderr or " is required" in bad.stderr),
              f"{name} --no-such-option: exit {bad.returncode}, {bad.stderr.strip()!r}")

    pingpong = next((p for p in programs if os.path.basename(p) == "pingpong"), None)
    if pingpong is None:
        sys.exit("cli_smoke.py: no pingpong among the programs")
    for args in (["--rounds=1000", "--mode=thread"], ["--rounds", "1000", "--mode", "thread"],
                 ["--rounds", "01000", "--json"]):
        done = run(pingpong, *args)
        check(done.returncode == 0 and ("1000" in done.stdout),
              f"pingpong {' '.join(args)}: exit {done.returncode}, 1000 round trips")
    for args, names in ((["--rounds", "0x10"], "--rounds"), (["--rounds=0"], "--rounds"),
                        (["--workers", "2000"], "--workers"), (["--mode", "fast"], "--mode"),
                        (["--mode", "thread", "--workers", "2"], "--workers"), (["--rounds"], "--rounds")):
        bad = run(pingpong, *args)
        check(bad.returncode == 2 and names in bad.stderr,
              f"pingpong {' '.join(args)}: exit {bad.returncode}, {bad.stderr.strip()!r}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
