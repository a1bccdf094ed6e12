"""Summarise perf recordings made by bench/profile.sh: CPU shares by category (self
time), the top functions by self time, and sluice's own functions by inclusive time.
Prints Markdown; writes JSON to the second argument. Only the standard library + perf."""
import json
import os
import re
import subprocess
import sys

# First match wins; matched against "dso symbol".
CATEGORIES = [
    ("snappy decompression", r"\bsnap::"),
    ("parquet: decode values/levels", r"\bparquet::(arrow::array_reader|arrow::record_reader|arrow::buffer|encodings|column::reader|util::bit_util|arrow::decoder)"),
    ("parquet: other", r"\bparquet::"),
    ("arrow: concat/take/slice (re-batching)", r"\barrow_select::|concat|interleave|\btake_"),
    ("arrow: other", r"\barrow_\w+::|\barrow::"),
    ("memcpy/memmove", r"__memmove|__memcpy|\bmemcpy\b|\bmemmove\b|__memset|\bmemset\b"),
    ("allocator (malloc/free)", r"malloc|\bfree\b|_int_free|realloc|cfree|calloc|tcache|unlink_chunk|alloc::alloc|__rust_alloc|__rust_dealloc|mallo"),
    ("kernel: page faults/memory", r"\[kernel\.kallsyms\].*(clear_page|page_fault|do_anonymous|alloc_pages|zap_|free_pages|unmap|mmap|rmqueue|memcg|lru|folio|handle_mm|exc_page)"),
    ("kernel: other (syscalls, scheduling, I/O)", r"\[kernel\.kallsyms\]"),
    ("tokio runtime", r"\btokio::"),
    ("object_store / I/O", r"\bobject_store::|\breqwest::|\bhyper::|\bstd::fs::|\bstd::io::"),
    ("sluice pipeline (batcher, ledger, devices)", r"\bsluice::|\bsluice_connectors::"),
]


def report(data, children=False, limit=40):
    cmd = ["perf", "report", "-i", data, "--stdio", "--no-inline", "--sort", "dso,sym",
           "--percent-limit", "0.2", "-g", "none"]
    cmd.append("--children" if children else "--no-children")
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(?:([\d.]+)%\s+)?(\S+)\s+\[[.k]\]\s+(.*)$", line)
        if m:
            rows.append((float(m.group(1)), m.group(3), m.group(4).strip()))
    return rows


def samples(data):
    out = subprocess.run(["perf", "report", "-i", data, "--stdio", "-n", "--no-children", "-g", "none",
                          "--sort", "comm"], capture_output=True, text=True).stdout
    return sum(int(m.group(1)) for m in re.finditer(r"^\s+[\d.]+%\s+(\d+)\s", out, re.M))


def callers(data, symbol, limit=8):
    """Who calls `symbol` (self time), as (percent of all samples, caller) pairs."""
    out = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-inline", "--no-children",
                          "--sort", "sym", "-g", "caller,0.5,callee,function,percent",
                          "--percent-limit", "1", "-S", symbol], capture_output=True, text=True).stdout
    res = []
    lines = out.splitlines()
    for i, line in enumerate(lines):
        m = re.search(r"--([\d.]+)%--(.+)$", line)
        if m:
            res.append((float(m.group(1)), m.group(2).strip()))
    return res[:limit]


def short(sym, n=110):
    sym = re.sub(r"::h[0-9a-f]{16}$", "", sym)
    return sym if len(sym) <= n else sym[: n - 1] + "…"


def categorize(rows):
    cats = {name: 0.0 for name, _ in CATEGORIES}
    cats["other"] = 0.0
    for pct, dso, sym in rows:
        key = f"{dso} {sym}"
        for name, rx in CATEGORIES:
            if re.search(rx, key):
                cats[name] += pct
                break
        else:
            cats["other"] += pct
    return cats


def main():
    work, out_json = sys.argv[1], sys.argv[2]
    res = {"categories": {}, "top_self": {}, "samples": {}}
    md = ["# Where sluice spends its CPU", "",
          "perf `cpu-clock` samples at 499 Hz with DWARF call stacks, over `sluice train --model none "
          "--devices 2 --batch-size 8192` and over the bare decode (the parquet crate's synchronous reader, "
          "2 threads) of the same files. Self time by category, then the top functions.", ""]
    for name in ("sluice", "decode"):
        data = os.path.join(work, f"{name}.data")
        if not os.path.exists(data):
            continue
        rows = report(data)
        res["samples"][name] = samples(data)
        res["categories"][name] = {k: round(v, 2) for k, v in categorize(rows).items()}
        res["top_self"][name] = [{"percent": p, "dso": d, "symbol": short(s, 200)} for p, d, s in rows[:30]]
        if name == "sluice":
            incl = [r for r in report(data, children=True)
                    if re.search(r"\bsluice(_connectors)?::", r[2])][:25]
            res["sluice_inclusive"] = [{"percent": p, "symbol": short(s, 200)} for p, d, s in incl]
        memmove = next((s for p, d, s in rows if "memmove" in s), None)
        if memmove:
            res.setdefault("memmove_callers", {})[name] = [
                {"percent": p, "caller": short(c, 200)} for p, c in callers(data, memmove)]
    cats = res["categories"]
    if cats:
        md += ["| category (% of CPU samples, self time) | " + " | ".join(cats) + " |",
               "|---|" + "---:|" * len(cats)]
        for k in next(iter(cats.values())):
            md.append(f"| {k} | " + " | ".join(f"{cats[n][k]:.1f}" for n in cats) + " |")
        md.append("")
    for name, top in res["top_self"].items():
        md += [f"## Top functions by self time: {name} ({res['samples'].get(name, 0)} samples)", "",
               "| % | where | function |", "|---:|---|---|"]
        md += [f"| {t['percent']:.1f} | {t['dso']} | `{short(t['symbol'])}` |" for t in top[:25]]
        md.append("")
    if res.get("sluice_inclusive"):
        md += ["## sluice's own functions by inclusive time (children included)", "",
               "| % | function |", "|---:|---|"]
        md += [f"| {t['percent']:.1f} | `{short(t['symbol'])}` |" for t in res["sluice_inclusive"]]
        md.append("")
    for name, cs in res.get("memmove_callers", {}).items():
        md += [f"## Who calls memmove: {name}", "", "| % of all samples | caller |", "|---:|---|"]
        md += [f"| {c['percent']:.1f} | `{short(c['caller'])}` |" for c in cs]
        md.append("")
    sl, de = cats.get("sluice"), cats.get("decode")
    if sl:
        top = sorted(((v, k) for k, v in sl.items()), reverse=True)[:4]
        res["summary"] = ("sluice's CPU, by self time: " + ", ".join(f"{k} {v:.0f}%" for v, k in top) + "."
                          + (f" The bare decode of the same files: " + ", ".join(
                              f"{k} {v:.0f}%" for v, k in sorted(((v, k) for k, v in de.items()), reverse=True)[:3]) + "."
                             if de else ""))
    print("\n".join(md))
    with open(out_json, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
