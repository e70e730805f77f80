#!/usr/bin/env python3
"""Figures of gpubench results from their CSV, for people who make their own.

    scripts/plot.py results.csv [more.csv ...] [--out DIR] [--print]

Reads CSV files written by `gpubench run --csv FILE` or `gpubench report --format csv` (docs/
output.md, section 4; any schema version with the columns used here) and draws, as PNG files in
DIR (default: the first file's folder):

  normalized.png  each workload's throughput over the RTX 8000's 2020 number, one bar per run
                  (device and precision): the report's main table as bars
  precision.png   each workload's throughput at amp-bf16, amp-fp16 or tf32 over the same card's
                  fp32 run: what mixed precision gains per card
  tiers.png       the max batch a memory tier's search found against the cap (GiB), one line
                  per workload and card
  per_kwh.png     units of work per kWh from the card's energy counter, one bar per run, scaled
                  to each workload's best (units differ between workloads)

A figure without rows to draw is left out with a line saying so. --print writes the numbers each
figure would draw instead, one line each, and needs no matplotlib (Debian: python3-matplotlib;
pip: matplotlib). The HTML report (`gpubench report --format html`) draws the same and more
without Python.
"""
import argparse
import csv
import math
import os
import sys
from collections import OrderedDict


def read_rows(paths):
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = {"model", "device", "precision", "status"} - set(reader.fieldnames or [])
            if missing:
                sys.exit(f"plot.py: {path}: not a gpubench CSV (no column {', '.join(sorted(missing))})")
            rows.extend(reader)
    return rows


def number(row, key):
    try:
        value = float(row.get(key) or "")
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def timed(rows):
    """Rows of timed jobs that trained on the whole card."""
    return [r for r in rows if r["status"] == "ok" and r.get("search_only", "false") != "true"
            and not r.get("memory_cap_gib")]


def run_name(row):
    return f"{row['device']} {row['precision']}"


def series(rows, value):
    """{workload: {run: value}} for the rows where value(row) is a number, in file order."""
    out = OrderedDict()
    for r in rows:
        v = value(r)
        if v is not None:
            out.setdefault(r["model"], OrderedDict())[run_name(r)] = v
    return out


def normalized(rows):
    return series(timed(rows), lambda r: number(r, "normalized_score"))


def precision_gain(rows):
    fp32 = {(r["model"], r["device"]): number(r, "throughput")
            for r in timed(rows) if r["precision"] == "fp32"}
    out = OrderedDict()
    for r in timed(rows):
        base = fp32.get((r["model"], r["device"]))
        mine = number(r, "throughput")
        if r["precision"] != "fp32" and base and mine:
            out.setdefault(r["model"], OrderedDict())[run_name(r)] = mine / base
    return out


def tiers(rows):
    """{workload on device precision: [(cap GiB, max batch)]}, caps ascending; 0 where none fit."""
    out = OrderedDict()
    for r in rows:
        cap = number(r, "memory_cap_gib")
        if r.get("search_only") != "true" or cap is None or r["status"] not in ("ok", "no-fit"):
            continue
        batch = number(r, "max_batch") or 0
        out.setdefault(f"{r['model']} on {run_name(r)}", []).append((cap, batch))
    return OrderedDict((k, sorted(v)) for k, v in out.items())


def per_kwh(rows):
    return series(timed(rows), lambda r: number(r, "units_per_kwh"))


def print_figures(figures):
    for name, data in figures.items():
        if not data:
            print(f"{name}: nothing to draw")
            continue
        for key, values in data.items():
            if isinstance(values, list):
                text = ", ".join(f"{cap:g} GiB: {batch:g}" for cap, batch in values)
            else:
                text = ", ".join(f"{run}: {v:.4g}" for run, v in values.items())
            print(f"{name}: {key}: {text}")


def bars(plt, data, title, ylabel, path, line=None, scale_each=False):
    workloads = list(data)
    runs = list(OrderedDict.fromkeys(run for v in data.values() for run in v))
    width = 0.8 / max(len(runs), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(workloads) + 2), 4.5))
    for i, run in enumerate(runs):
        heights = []
        for w in workloads:
            v = data[w].get(run, 0)
            top = max(data[w].values()) if scale_each else 1
            heights.append(v / top if top else 0)
        ax.bar([x + i * width for x in range(len(workloads))], heights, width, label=run)
    ax.set_xticks([x + width * (len(runs) - 1) / 2 for x in range(len(workloads))])
    ax.set_xticklabels(workloads, rotation=30, ha="right")
    if line is not None:
        ax.axhline(line, color="grey", linestyle="--", linewidth=1)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def draw(figures, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py: matplotlib is not installed (Debian: apt-get install python3-matplotlib; "
                 "or pip install matplotlib); --print gives the numbers without it")
    os.makedirs(out, exist_ok=True)
    titles = {
        "normalized": ("Training throughput normalized to the RTX 8000 (2020)", "x RTX 8000", 1.0, False),
        "precision": ("Mixed precision over fp32, same card", "x fp32", 1.0, False),
        "per_kwh": ("Units of work per kWh, each workload scaled to its best run",
                    "share of the best", None, True),
    }
    for name, data in figures.items():
        path = os.path.join(out, name + ".png")
        if not data:
            print(f"plot.py: {name}: nothing to draw, left out")
        elif name == "tiers":
            fig, ax = plt.subplots(figsize=(7, 4.5))
            for key, points in data.items():
                ax.plot([c for c, _ in points], [b for _, b in points], marker="o", label=key)
            ax.set_title("Max batch under a memory cap (emulated smaller cards)")
            ax.set_xlabel("memory cap (GiB)")
            ax.set_ylabel("max batch (the workload's unit)")
            ax.set_yscale("symlog")
            ax.legend(fontsize="small")
            fig.tight_layout()
            fig.savefig(path, dpi=120)
            plt.close(fig)
            print(f"plot.py: wrote {path}")
        else:
            title, ylabel, line, scale_each = titles[name]
            bars(plt, data, title, ylabel, path, line, scale_each)
            print(f"plot.py: wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", nargs="+", help="CSV files of gpubench run --csv or report --format csv")
    parser.add_argument("--out", help="folder for the PNG files (default: the first CSV's folder)")
    parser.add_argument("--print", action="store_true", dest="print_only",
                        help="print each figure's numbers instead of drawing (no matplotlib)")
    args = parser.parse_args()
    rows = read_rows(args.csv)
    figures = OrderedDict([("normalized", normalized(rows)), ("precision", precision_gain(rows)),
                           ("tiers", tiers(rows)), ("per_kwh", per_kwh(rows))])
    if args.print_only:
        print_figures(figures)
    else:
        draw(figures, args.out or os.path.dirname(os.path.abspath(args.csv[0])))


if __name__ == "__main__":
    main()
