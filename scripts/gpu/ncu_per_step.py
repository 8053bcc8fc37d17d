#!/usr/bin/env python3
"""Per-kernel device time per NeRF training step, from an ncu CSV.

Input: `ncu --metrics gpu__time_duration.sum --csv` over `tessera nerf train` (see the
`nerf-kernels` step of scripts/gpu/run.sh). The window is cut to whole steps: from the
first training march to the last (a step starts with its march; an evaluation's march has
another grid size and comes with composite_render, so a window that reaches an evaluation
is refused rather than mixed in). Prints microseconds per step, largest first.
"""
import argparse
import collections
import csv
import sys


def kernel_name(full):
    """`void ns::<unnamed>::grid_forward_kernel<3, 4, __half>(args)` -> `grid_forward_kernel<3, 4, __half>`."""
    name = full.replace("void ", "", 1).replace("<unnamed>::", "").split("(", 1)[0]
    base, sep, template_args = name.partition("<")
    return base.split("::")[-1] + sep + template_args


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --csv output (the lines before its header are skipped)")
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        lines = f.read().splitlines()
    header = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if header is None:
        sys.exit(f"{args.csv}: no ncu CSV header (\"ID\",...): did ncu profile any kernel?")
    rows = [r for r in csv.DictReader(lines[header:]) if r.get("Metric Name") == "gpu__time_duration.sum"]
    names = [kernel_name(r["Kernel Name"]) for r in rows]
    if any(n.startswith("composite_render") for n in names):
        sys.exit("the window reaches an evaluation (composite_render): profile with --eval-at past the run's "
                 "end and a smaller --launch-skip")
    marches = [i for i, n in enumerate(names) if n.startswith("march_kernel")]
    if len(marches) < 2:
        sys.exit(f"{len(marches)} training marches in the window: a whole step needs 2; raise --launch-count")
    first, last = marches[0], marches[-1]
    n_steps = len(marches) - 1
    unit = rows[0]["Metric Unit"]
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit)
    if scale is None:
        sys.exit(f"unexpected metric unit {unit!r}")
    per_kernel = collections.defaultdict(float)
    launches = collections.Counter()
    for r, n in zip(rows[first:last], names[first:last]):
        per_kernel[n] += float(r["Metric Value"].replace(",", "")) * scale
        launches[n] += 1
    total = sum(per_kernel.values())
    print(f"{n_steps} whole steps, {last - first} launches ({(last - first) / n_steps:.1f} a step); "
          f"microseconds per step, kernels serialized by ncu")
    for n, us in sorted(per_kernel.items(), key=lambda kv: -kv[1]):
        print(f"{us / n_steps:9.1f}  {launches[n] / n_steps:5.2f}x  {n}")
    print(f"{total / n_steps:9.1f}  sum")


if __name__ == "__main__":
    main()
