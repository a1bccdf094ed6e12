#!/usr/bin/env python3
"""Summarise the files record_ids.py left in a directory.

Usage:
    python tests/trainers/collect_ids.py DIR [--expect N]

Prints one JSON object:
    {"ids": <lines in all ids-*.txt>, "unique": <distinct ids>, "dups": ids - unique,
     "unacked": <lines in unacked-*.txt>, "files": <number of ids-*.txt>,
     "died": [<devices with a died-* marker>]}
With --expect N it also reports "missing" and "extra" against the ids 0..N-1 and
exits 1 unless every one of them was recorded exactly once.
"""

import argparse
import glob
import json
import os
import sys


def read_ids(paths):
    out = []
    for p in paths:
        with open(p) as f:
            out.extend(int(line) for line in f if line.strip())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--expect", type=int, metavar="N",
                    help="check that ids 0..N-1 each arrived exactly once")
    args = ap.parse_args()

    id_files = sorted(glob.glob(os.path.join(args.dir, "ids-*.txt")))
    ids = read_ids(id_files)
    unacked = read_ids(sorted(glob.glob(os.path.join(args.dir, "unacked-*.txt"))))
    unique = set(ids)
    report = {
        "ids": len(ids),
        "unique": len(unique),
        "dups": len(ids) - len(unique),
        "unacked": len(unacked),
        "files": len(id_files),
        "died": sorted(os.path.basename(p)[len("died-"):]
                       for p in glob.glob(os.path.join(args.dir, "died-*"))),
    }
    ok = True
    if args.expect is not None:
        want = set(range(args.expect))
        report["missing"] = len(want - unique)
        report["extra"] = len(unique - want)
        ok = report["missing"] == 0 and report["extra"] == 0 and report["dups"] == 0
    print(json.dumps(report))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
