#!/usr/bin/env python3
"""Prints a side-by-side table of two `tessera bench ... --json` results (same suite):
baseline vs new, median ms and new/baseline. Usage: compare_bench.py BASE.json NEW.json"""
import json
import sys


def times(result):
    # mlp / encoding: train and infer medians; gemm / gemv: one time per case (+ kernel).
    if "train_ms_median" in result:
        return {"train": result["train_ms_median"], "infer": result["infer_ms_median"]}
    key = result.get("kernel", "")
    return {key or "ms": result["ms"]}


def main(base_path, new_path):
    base, new = json.load(open(base_path)), json.load(open(new_path))
    print(f"suite {new.get('suite')} on {new.get('gpu')}: baseline {base_path} vs new {new_path}")
    print(f"{'case':<44} {'what':<8} {'base ms':>10} {'new ms':>10} {'new/base':>9}")
    seen = {}
    for r in base["results"]:
        seen.setdefault(r["case"], []).append(r)
    worst = 0.0
    for r in new["results"]:
        candidates = seen.get(r["case"], [])
        b = next((c for c in candidates if c.get("kernel") == r.get("kernel")), None)
        if b is None:
            continue
        for what, t_new in times(r).items():
            t_base = times(b).get(what)
            if not t_base:
                continue
            ratio = t_new / t_base
            worst = max(worst, ratio)
            print(f"{r['case']:<44} {what:<8} {t_base:>10.4f} {t_new:>10.4f} {ratio:>9.3f}")
    print(f"worst new/base: {worst:.3f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
