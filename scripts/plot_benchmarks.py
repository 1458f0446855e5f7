#!/usr/bin/python3
"""Plots weft's benchmark figures into one PNG (docs/benchmarks.png).

Reads the --json output of the benchmark programs, one or more runs each,
and plots the median of the runs:

  build/benchmarks/pingpong --mode all --json > pingpong.json     # a JSON array per run
  build/benchmarks/skynet --workers 2 --json >> skynet.jsonl      # one JSON object per line
  build/benchmarks/park_memory --json >> park.jsonl
  scripts/plot_benchmarks.py --pingpong pingpong.json [more.json ...] \\
      [--skynet skynet.jsonl] [--park park.jsonl] [-o docs/benchmarks.png]

weft beside its peers (scripts/bench-peers), one bar per row: weft's median
over the best peer's (below 1: weft is faster; for requests/s, above 1):

  scripts/bench-peers --json > peers.json
  scripts/plot_benchmarks.py --peers peers.json [--peers-output docs/peers.png]

The gateway's latency distribution goes to a picture of its own:

  scripts/bench-gateway --json > gateway.json
  scripts/plot_benchmarks.py --gateway gateway.json [--gateway-output docs/gateway.png]

Needs Debian's python3 with python3-matplotlib, hence /usr/bin/python3 (a pyenv
or venv python3 first on PATH would not see it).
"""

import argparse
import json
import statistics
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# The peers' figures on this machine (issue 4), for the reference lines.
GO_PINGPONG_NS = {1: 202, 2: 256}
BOOST_PINGPONG_NS = {1: 211, 2: 263}
TARGET_PINGPONG_NS = 100
GO_SKYNET = {"ms": 669, "rss_mib": 238}
BOOST_SKYNET = {"ms": 1345, "rss_mib": 468}
TARGET_SKYNET = {"ms": 300, "rss_mib": 250}
GO_PARK_KIB = 2.9
BOOST_PARK_KIB = 7.3
TARGET_PARK_KIB = 5


def load_json_values(paths):
    """Every JSON value in the files: a whole-file value, else one per line."""
    values = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            values.append(json.loads(text))
        except json.JSONDecodeError:
            values.extend(json.loads(line) for line in text.splitlines() if line.strip())
    return values


def pingpong_medians(paths):
    """{label: median ns per round trip} over the runs, in the programs' order."""
    samples = {}
    for run in load_json_values(paths):
        for row in run if isinstance(run, list) else [run]:
            label = row["mode"] if row["workers"] == 0 else f"{row['mode']}\n{row['workers']} worker" + (
                "s" if row["workers"] > 1 else "")
            samples.setdefault(label, []).append(row["ns_per_round_trip"])
    return {label: statistics.median(v) for label, v in samples.items()}, max(len(v) for v in samples.values())


def bar_labels(ax, bars, fmt):
    for bar in bars:
        ax.annotate(fmt(bar.get_height()), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")


def plot_pingpong(ax, paths):
    medians, runs = pingpong_medians(paths)
    labels = list(medians)
    values = [medians[k] for k in labels]
    colors = ["tab:green" if k.startswith("fiber") else "tab:red" for k in labels]
    bars = ax.bar(labels, values, color=colors)
    ax.set_yscale("log")
    ax.set_ylabel("ns per round trip (log)")
    ax.set_title(f"PingPong, median of {runs} run(s)")
    bar_labels(ax, bars, lambda v: f"{v:,.0f}")
    ax.axhline(TARGET_PINGPONG_NS, color="tab:green", linestyle=":", linewidth=1, label="target (1 worker) 100 ns")
    ax.axhline(GO_PINGPONG_NS[1], color="tab:blue", linestyle="--", linewidth=1, label="Go, GOMAXPROCS=1: 202 ns")
    ax.axhline(BOOST_PINGPONG_NS[1], color="tab:orange", linestyle="--", linewidth=1,
               label="Boost.Fiber, one thread: 211 ns")
    ax.legend(fontsize=7, loc="upper left")
    ax.tick_params(axis="x", labelsize=8)


def plot_peers(ax, title, ylabel, ours, key, go, boost, target, fmt):
    labels = ["weft", "Go 1.19", "Boost.Fiber"]
    values = [ours, go, boost]
    bars = ax.bar(labels, values, color=["tab:green", "tab:blue", "tab:orange"])
    ax.axhline(target, color="tab:green", linestyle=":", linewidth=1, label=f"target {fmt(target)}")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    bar_labels(ax, bars, fmt)
    ax.legend(fontsize=7)


def plot_gateway(path, output):
    """Latency against percentile, p1 to p99.99, one line per mode and load.

    The x axis is -log10(1 - p), so that p90, p99 and p99.9 are equally
    apart: the tail, which a mean hides, is most of the picture."""
    import math

    doc = load_json_values([path])[0]
    loads = sorted({r["connections"] for r in doc["runs"]})
    fig, axes = plt.subplots(1, len(loads), figsize=(6.5 * len(loads), 5), squeeze=False)
    ticks = [50, 90, 99, 99.9, 99.99]
    for ax, load in zip(axes[0], loads):
        for r in (r for r in doc["runs"] if r["connections"] == load):
            points = sorted((float(p), ms) for p, ms in r["percentiles_ms"].items())
            xs = [-math.log10(1 - p / 100) for p, _ in points]
            label = f"{r['mode']}: {r['requests_per_s']:,.0f} req/s"
            if r["error_count"]:
                label += f", {r['error_count']} errors"
            ax.plot(xs, [ms for _, ms in points], marker=".", label=label)
        ax.set_xticks([-math.log10(1 - t / 100) for t in ticks], [f"p{t:g}" for t in ticks])
        ax.set_yscale("log")
        ax.set_ylabel("latency, ms (log)")
        ax.axhline(doc.get("delay_ms", 100), color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"{load} connections (limit {load * 10:,} req/s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    modes = sorted({r["mode"] for r in doc["runs"]})
    fig.suptitle(f"gateway -> backend (100 ms): latency by percentile, {', '.join(modes)} (wrk, loopback)")
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    print(f"wrote {output}", file=sys.stderr)


def plot_peers_ratios(path, output):
    """weft / best peer per row of scripts/bench-peers --json; a line at 1."""
    doc = load_json_values([path])[0]
    labels, ratios, colours = [], [], []
    names = {"tokio": "tokio", "go": "Go", "boost-fiber": "Boost.Fiber"}
    for entry in doc["summary"]:
        for i, ratio in enumerate(entry.get("ratio_to_best", [])):
            suffix = ["netpoller", "hooked"][i] if len(entry["ratio_to_best"]) > 1 else ""
            label = entry["label"].split(",")[0] + (f" {entry['row'].split('-')[-1]}" if "-" in entry["row"] else "")
            name = textwrap.fill(f"{label}{' ' + suffix if suffix else ''}", 16)  # two lines rather than overlap
            labels.append(f"{name}\n(vs {names[entry['best_peer']]})")
            # For requests/s higher is better: plot best / weft so that below 1 means ahead everywhere.
            value = 1 / ratio if entry["better"] == "higher" else ratio
            ratios.append(value)
            colours.append("tab:green" if value <= 1 else "tab:red")
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(labels)), 5))
    bars = ax.bar(range(len(labels)), ratios, color=colours)
    bar_labels(ax, bars, lambda v: f"{v:.2f}")
    ax.axhline(1, color="black", linewidth=1)
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel("weft's cost / best peer's (below 1: weft ahead)")
    ax.set_title(f"weft against the best of tokio, Go, Boost.Fiber: medians of {doc['rounds']} rounds, "
                 f"{doc['date']}, {doc['machine']['cpus']} CPUs", fontsize=9)
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    print(f"wrote {output}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pingpong", nargs="+", default=[], help="pingpong --mode all --json output(s)")
    parser.add_argument("--skynet", nargs="+", default=[], help="skynet --json output(s)")
    parser.add_argument("--park", nargs="+", default=[], help="park_memory --json output(s)")
    parser.add_argument("-o", "--output", default="docs/benchmarks.png")
    parser.add_argument("--gateway", help="scripts/bench-gateway --json output")
    parser.add_argument("--gateway-output", default="docs/gateway.png")
    parser.add_argument("--peers", help="scripts/bench-peers --json output")
    parser.add_argument("--peers-output", default="docs/peers.png")
    args = parser.parse_args()
    if not args.pingpong and not args.gateway and not args.peers:
        parser.error("give --pingpong (and --skynet, --park), --gateway or --peers")
    if args.gateway:
        plot_gateway(args.gateway, args.gateway_output)
    if args.peers:
        plot_peers_ratios(args.peers, args.peers_output)
    if not args.pingpong:
        return

    skynet = [r for r in load_json_values(args.skynet) if r.get("workers") == 2 and r.get("ok")]
    park = [r for r in load_json_values(args.park) if not r.get("error")]
    panels = 1 + (2 if skynet else 0) + (1 if park else 0)
    if panels == 1:
        fig, ax = plt.subplots(figsize=(8, 5))
        axes = [ax]
    else:
        # PingPong across the top, the others side by side below it.
        fig = plt.figure(figsize=(4.2 * (panels - 1) + 1, 9))
        grid = fig.add_gridspec(2, panels - 1)
        axes = [fig.add_subplot(grid[0, :])] + [fig.add_subplot(grid[1, i]) for i in range(panels - 1)]
    plot_pingpong(axes[0], args.pingpong)
    i = 1
    if skynet:
        ms = statistics.median(r["ms"] for r in skynet)
        rss = statistics.median(r["peak_rss_mib"] for r in skynet)
        plot_peers(axes[i], f"skynet 1M, 2 workers ({len(skynet)} runs)", "ms", ms, "ms", GO_SKYNET["ms"],
                   BOOST_SKYNET["ms"], TARGET_SKYNET["ms"], lambda v: f"{v:,.0f} ms")
        plot_peers(axes[i + 1], "skynet 1M, 2 workers: peak RSS", "MiB", rss, "rss", GO_SKYNET["rss_mib"],
                   BOOST_SKYNET["rss_mib"], TARGET_SKYNET["rss_mib"], lambda v: f"{v:,.0f} MiB")
        i += 2
    if park:
        kib = statistics.median(r["bytes_per_fiber"] for r in park) / 1024
        plot_peers(axes[i], f"RSS per parked fiber ({len(park)} runs)", "KiB", kib, "kib", GO_PARK_KIB,
                   BOOST_PARK_KIB, TARGET_PARK_KIB, lambda v: f"{v:.1f} KiB")
    fig.suptitle("weft on this machine (2 cores); peers' figures from issue 4, same machine")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
