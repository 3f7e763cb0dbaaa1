"""Store benchmark: raw mmap baseline vs CommitLog append (single, batch 32), dispatch rate and
recovery time per GiB, all in one run. Usage: ``python bench/store_bench.py [--count N] [--runs R]``.

Same as ``ferrymq bench store``; several runs report the best and the spread of each ratio.
"""

from __future__ import annotations

import argparse
import statistics

from ferrymq.store.benchmark import format_report, run_benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    ratios: dict[str, list[float]] = {}
    for run in range(args.runs):
        report = run_benchmark(args.count, args.batch)
        print(f"--- run {run + 1}/{args.runs}")
        print("\n".join(format_report(report)))
        for f in report.figures[1:]:
            ratios.setdefault(f.name, []).append(f.ratio)
    print("--- ratio to the baseline over runs: best / median / worst")
    for name, values in ratios.items():
        print(f"{name:36} {max(values):.3f} / {statistics.median(values):.3f} / {min(values):.3f}")


if __name__ == "__main__":
    main()
