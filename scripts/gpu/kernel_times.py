#!/usr/bin/env python3
"""Sums an `ncu --metrics gpu__time_duration.sum --csv` log per kernel: time per step
(steps = launches of the kernel named by --per, once per step), count, share. Usage:
    kernel_times.py ncu.csv [--per march_kernel]"""
import csv, collections, sys

path = sys.argv[1]
per = sys.argv[sys.argv.index("--per") + 1] if "--per" in sys.argv else "march_kernel"
rows = [r for r in csv.reader(open(path)) if len(r) > 10]
head = rows[0]
name_col, value_col = head.index("Kernel Name"), head.index("Metric Value")
total, count = collections.Counter(), collections.Counter()
for r in rows[1:]:
    try:
        v = float(r[value_col].replace(",", ""))
    except ValueError:
        continue
    name = r[name_col].split("(")[0].split("<")[0].strip()
    total[name] += v
    count[name] += 1
steps = max(1, sum(c for n, c in count.items() if n.endswith(per)))
all_ns = sum(total.values())
print(f"{steps} steps profiled; kernel time per step {all_ns / steps / 1e6:.3f} ms")
for name, ns in total.most_common(30):
    print(f"{ns / steps / 1e3:9.1f} us/step  {count[name] / steps:5.1f} launches/step  {100 * ns / all_ns:5.1f}%  {name}")
