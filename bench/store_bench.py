"""Store benchmark: raw mmap copy of 1 KiB records (the baseline) vs CommitLog append singly and
in batches of 32, the dispatch rate and recovery time per GiB, all measured in one run.

Usage: ``python bench/store_bench.py [--count N] [--rounds R] [--runs K]`` (same as
``ferrymq bench store``). Within a run the paths are measured in interleaved rounds and each
path's rate (summed over the rounds) is divided by the baseline's; across runs the best and the
spread are printed.
"""

from __future__ import annotations

import argparse

from ferrymq.store.benchmark import format_report, run_benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=64_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    overall: dict[str, list[float]] = {}
    for run in range(args.runs):
        report = run_benchmark(args.count, args.batch, args.rounds)
        print(f"--- run {run + 1}/{args.runs}")
        print("\n".join(format_report(report)))
        for f in report.figures[1:]:
            overall.setdefault(f.name, []).append(f.ratio)
        overall.setdefault("dispatch (rebuild)", []).append(report.dispatch_ratio)
    print("--- ratio to the baseline across runs: best / median / worst")
    for name, values in overall.items():
        values.sort()
        print(f"{name:32} {values[-1]:.3f} / {values[len(values) // 2]:.3f} / {values[0]:.3f}")


if __name__ == "__main__":
    main()
