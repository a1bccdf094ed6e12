"""Two builds of sluice side by side on the reader benchmark, interleaved.

    python3 bench/compare.py --base BIN --head BIN --data DIR [--pairs 7]
        [--cpus 0,1] [--devices 2] [--batch-size 8192] [--out FILE.json]
        [-- EXTRA sluice train ARGS...]

Runs `sluice train DIR --model none` of the two binaries in alternated pairs (base,
head, base, head, ...; the first of each pair alternates too, so neither always runs
on a cache warmed by the other), each pinned to --cpus, and prints the ratio of head's
rows/s to base's: the median over the pairs and its spread (lowest, highest), with the
CPU seconds and peak memory of both. A ratio above 1 means head is faster. Writes
every run to --out. Uses bench/measure.py's runner: whole processes, wall time.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import run_once  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the sluice binary to compare against")
    ap.add_argument("--head", required=True, help="the sluice binary being measured")
    ap.add_argument("--base-label", default="base")
    ap.add_argument("--head-label", default="head")
    ap.add_argument("--data", required=True)
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--out")
    ap.add_argument("extra", nargs="*", help="more `sluice train` arguments, after --")
    args = ap.parse_args()

    summary = os.path.join(tempfile.mkdtemp(prefix="sluice-compare-"), "summary.json")

    def once(binary):
        cmd = [binary, "train", args.data, "--model", "none", "--devices", str(args.devices),
               "--batch-size", str(args.batch_size), "--quiet", "--summary-json", summary]
        rep = run_once(cmd + args.extra, dict(os.environ), args.cpus, summary)
        if "error" in rep:
            sys.exit(f"bench/compare.py: {binary} failed: {rep['error']}")
        rep["rows_per_second"] = rep["rows"] / rep["wall_seconds"]
        return rep

    runs = {"base": [], "head": []}
    for i in range(args.pairs):
        order = ["base", "head"] if i % 2 == 0 else ["head", "base"]
        for side in order:
            runs[side].append(once(getattr(args, side)))
        b, h = runs["base"][-1], runs["head"][-1]
        print(f"pair {i + 1}/{args.pairs}: {args.base_label} {b['rows_per_second'] / 1e6:.2f} M rows/s, "
              f"{args.head_label} {h['rows_per_second'] / 1e6:.2f} M rows/s, "
              f"ratio {h['rows_per_second'] / b['rows_per_second']:.3f}", file=sys.stderr)
    rows = {runs["base"][0]["rows"], runs["head"][0]["rows"]}
    if len(rows) != 1:
        sys.exit(f"bench/compare.py: the builds read different row counts: {sorted(rows)}")
    ratios = [h["rows_per_second"] / b["rows_per_second"] for b, h in zip(runs["base"], runs["head"])]

    def med(side, key):
        return statistics.median(r[key] for r in runs[side])

    def cpu(side):
        return statistics.median(r["user_seconds"] + r["system_seconds"] for r in runs[side])

    result = {
        "base": args.base_label, "head": args.head_label, "pairs": args.pairs,
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "ratios": ratios,
        "rows_per_second": {s: med(s, "rows_per_second") for s in runs},
        "cpu_seconds": {s: cpu(s) for s in runs},
        "peak_pss_mb": {s: med(s, "peak_pss_mb") for s in runs},
        "other_cores": {s: med(s, "other_cores") for s in runs},
        "runs": runs,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    print(f"{args.head_label} ÷ {args.base_label}: {result['ratio_median']:.3f}× rows/s "
          f"(median of {args.pairs} alternated pairs; spread {result['ratio_min']:.3f}–{result['ratio_max']:.3f}); "
          f"CPU s {cpu('head'):.2f} vs {cpu('base'):.2f}; peak PSS {med('head', 'peak_pss_mb'):.0f} vs "
          f"{med('base', 'peak_pss_mb'):.0f} MB; other cores busy {max(result['other_cores'].values()):.2f}")


if __name__ == "__main__":
    main()
