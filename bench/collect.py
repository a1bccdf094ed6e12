"""Merge the bench's raw runs into bench/results/results.json: the dataset, the machine,
every reader's runs and medians, ratios to sluice and the targets they are held against.
Only the standard library."""
import argparse
import datetime
import json
import os
import platform
import subprocess

# (peer, group, what, wanted): sluice's rows/s must be at least `wanted` times the peer's
# (bare decode: at least 0.9 of it); memory: sluice's peak at most 1/4 of pyarrow's.
TARGETS = [
    ("pyarrow", "local", "rows/s", 1.5),
    ("decode", "local", "rows/s", 0.9),
    ("decode_view", "local", "rows/s", 0.9),
    ("petastorm", "local", "rows/s", 2.0),
    ("torch", "local", "rows/s", 15.0),
    ("ray", "local", "rows/s", 15.0),
    ("pyarrow", "local", "peak RSS", 4.0),
]

# PyTorch targets: (reader, base reader, wanted): the reader's rows/s at least `wanted`
# times the base's (sluice --model none on the same data); wanted None: reported only.
TORCH_TARGETS = [
    ("torch_sluice", "sluice", 0.7),
    ("numpy_shm", "sluice_numeric", 0.8),
    ("numpy_pipe", "sluice_numeric", None),
    ("torch", "torch_sluice", None),
    ("ray_torch", "torch_sluice", None),
    ("petastorm_torch", "torch_sluice", None),
    ("torch_example", "torch_ctr_dataloader", None),
]


def torch_targets(readers):
    named = {r["name"]: r for r in readers}
    out = []
    for name, base, wanted in TORCH_TARGETS:
        r, b = named.get(name, {}), named.get(base, {})
        t = {"reader": name, "base": base, "wanted": wanted}
        if "rows_per_second" not in r or "rows_per_second" not in b:
            t.update(status="not measured", reason=r.get("error") or b.get("error") or "not run")
        else:
            t["measured"] = r["rows_per_second"] / b["rows_per_second"]
            t["status"] = ("reported" if wanted is None
                           else "met" if t["measured"] >= wanted else "not met")
        out.append(t)
    return out


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine():
    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) // 1024
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_mb": mem, "kernel": platform.release(),
            "rustc": sh("rustc", "--version"),
            "commit": sh("git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD")}


def main():
    ap = argparse.ArgumentParser()
    for k in ["raw", "meta", "out", "cpus", "status-dir"]:
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--built", default=None, help="the commit sluice was built from")
    for k in ["rows", "reps", "batch-size", "quick"]:
        ap.add_argument("--" + k, type=int, required=True)
    a = ap.parse_args()
    readers = [json.loads(l) for l in open(a.raw) if l.strip()]
    by = {(r["name"].removesuffix("_s3"), r["group"]): r for r in readers}
    for r in readers:
        base = by.get(("sluice", r["group"]))
        if base and "rows_per_second" in base and "rows_per_second" in r:
            r["sluice_speedup"] = base["rows_per_second"] / r["rows_per_second"]
            r["memory_vs_sluice"] = r["peak_rss_mb"] / base["peak_rss_mb"]
    targets = []
    sl = by.get(("sluice", "local"), {})
    for peer, group, what, wanted in TARGETS:
        p = by.get((peer, group), {})
        t = {"peer": peer, "group": group, "what": what, "wanted": wanted}
        if "rows_per_second" not in sl or "rows_per_second" not in p:
            t.update(status="not measured", reason=p.get("error") or sl.get("error") or "not run")
        elif what == "rows/s":
            t["measured"] = sl["rows_per_second"] / p["rows_per_second"]
            t["status"] = "met" if t["measured"] >= wanted else "not met"
        else:
            t["measured"] = p["peak_rss_mb"] / sl["peak_rss_mb"]
            t["status"] = "met" if t["measured"] >= wanted else "not met"
        targets.append(t)
    status = {}
    for f in sorted(os.listdir(a.status_dir)):
        if "." not in f:
            status[f] = open(os.path.join(a.status_dir, f)).read().strip()
    loads = [r.get("loadavg_before", 0) for r in readers if "loadavg_before" in r]
    # Ray's daemons are not all waited for, and moto serves the S3 runs from its own
    # process: their CPU counts as "other", so leave them out.
    others = [r["other_cores"] for r in readers
              if "other_cores" in r and r["name"] != "ray" and r["group"] == "local"]
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "quick": bool(a.quick),
        "settings": {"rows": a.rows, "repetitions": a.reps, "cpus": a.cpus,
                     "batch_size": a.batch_size,
                     "seconds": "each reader's own: open/list to last batch (sluice: run summary)",
                     "mb_per_second": "on-disk snappy Parquet bytes / seconds",
                     "peak_rss": "peak of the summed PSS of the reader's process tree, sampled every 50 ms"},
        "dataset": json.load(open(a.meta)),
        "machine": dict(machine(), **({"commit": a.built} if a.built else {})),
        "max_loadavg_before_a_reader": max(loads) if loads else None,
        "max_other_cores": max(others) if others else None,
        "peers": status,
        "readers": readers,
        "targets": targets,
        "torch_targets": torch_targets(readers),
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
