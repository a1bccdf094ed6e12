"""Render bench/results/results.json as report.md and chart.png (matplotlib).

    python report.py bench/results

Also folds in bench/results/profile.json/.md (where sluice's CPU goes, from bench/profile.sh)
and the master load figures of bench/load (bench/results/load.md / load.json) when present.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

GROUP_TITLE = {"local": "local disk (page cache)", "s3": "S3 (moto emulator on the same machine)"}
TARGET_TEXT = {
    ("pyarrow", "rows/s"): "sluice ≥ 1.5× pyarrow.dataset rows/s",
    ("decode", "rows/s"): "sluice ≥ 0.9× the bare decode rows/s",
    ("decode_view", "rows/s"): "sluice ≥ 0.9× the bare decode with strings as Utf8View",
    ("petastorm", "rows/s"): "sluice ≥ 2× Petastorm rows/s",
    ("torch", "rows/s"): "sluice ≥ 15× the PyTorch DataLoader rows/s",
    ("ray", "rows/s"): "sluice ≥ 15× Ray Data rows/s",
    ("pyarrow", "peak RSS"): "sluice's peak RSS ≤ ¼ of pyarrow.dataset's",
}


def fmt_rate(x):
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.0f} k"


def table(res, group):
    rows = [r for r in res["readers"] if r["group"] == group]
    out = ["| reader | rows/s | MB/s | peak RSS (MB) | sluice's speed ÷ reader's | reader's memory ÷ sluice's | runs |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "rows_per_second" not in r:
            reason = r.get("error", "not run").strip().splitlines()[-1][:160].replace("|", "/")
            out.append(f"| {r['label']} | — | — | — | — | — | {reason} |")
            continue
        sp = r.get("sluice_speedup")
        mem = r.get("memory_vs_sluice")
        name = f"**{r['label']}**" if r["name"].startswith("sluice") else r["label"]
        is_sl = r["name"] in ("sluice", "sluice_s3")
        out.append(
            f"| {name} | {fmt_rate(r['rows_per_second'])} | {r['mb_per_second']:.0f} | "
            f"{r['peak_rss_mb']:.0f} | {'1' if is_sl else f'{sp:.2f}×' if sp else '—'} | "
            f"{'1' if is_sl else f'{mem:.2f}×' if mem else '—'} | {len([x for x in r['runs'] if 'error' not in x])} |")
    return "\n".join(out)


def chart(res, path):
    groups = [g for g in ("local", "s3") if any(r["group"] == g and "rows_per_second" in r for r in res["readers"])]
    if not groups:
        return False  # e.g. `--only numeric`: no reader of the main table ran
    fig, axes = plt.subplots(len(groups), 2, figsize=(12, 1.2 + 0.55 * sum(
        len([r for r in res["readers"] if r["group"] == g and "rows_per_second" in r]) for g in groups) + 0.8 * len(groups)),
        squeeze=False, gridspec_kw={"height_ratios": [
            max(2, len([r for r in res["readers"] if r["group"] == g and "rows_per_second" in r])) for g in groups]})
    for gi, g in enumerate(groups):
        rs = [r for r in res["readers"] if r["group"] == g and "rows_per_second" in r][::-1]
        labels = [r["label"] for r in rs]
        colors = ["#d9480f" if r["name"].startswith("sluice") else "#868e96" if r["name"].startswith("decode") else "#1c7ed6" for r in rs]
        ax = axes[gi][0]
        vals = [r["rows_per_second"] / 1e6 for r in rs]
        ax.barh(labels, vals, color=colors)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("million rows/s (log scale)")
        ax.set_title(f"rows/s, {GROUP_TITLE[g]}", fontsize=10)
        for i, v in enumerate(vals):
            ax.text(v, i, f" {v:.2f}", va="center", fontsize=8)
        ax.set_xlim(min(vals) / 2, max(vals) * 4)
        ax = axes[gi][1]
        mem = [r["peak_rss_mb"] for r in rs]
        ax.barh(labels, mem, color=colors)
        ax.set_xlabel("MB")
        ax.set_title("peak RSS (process tree, PSS)", fontsize=10)
        ax.set_yticklabels([])
        for i, v in enumerate(mem):
            ax.text(v, i, f" {v:.0f}", va="center", fontsize=8)
        ax.set_xlim(0, max(mem) * 1.25)
    d = res["dataset"]
    fig.suptitle(f"Criteo-like {d['rows']:,} rows × {d['columns']} columns, {d['parquet_bytes'] / 1e6:.0f} MB snappy Parquet, "
                 f"batches of {res['settings']['batch_size']}, 2 cores", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def targets(res):
    out = []
    for t in res["targets"]:
        text = TARGET_TEXT[(t["peer"], t["what"])]
        if t["status"] == "not measured":
            out.append(f"- **not measured**: {text} ({t['reason'].strip().splitlines()[-1][:160]})")
        else:
            word = "met" if t["status"] == "met" else "**not met**"
            if t["what"] == "rows/s":
                m = f"measured {t['measured']:.2f}×"
            else:
                m = f"pyarrow's peak is {t['measured']:.1f}× sluice's (wanted ≥ 4×)"
            out.append(f"- {word}: {text}: {m}")
    return "\n".join(out)


TORCH_TABLES = [
    ("Batches as torch tensors (the same string-heavy data, 2 processes or workers)",
     ["sluice", "torch_sluice", "torch", "ray_torch", "petastorm_torch"], "sluice"),
    ("All-numeric data of the same width: batches wrapped as numpy in Python processes",
     ["sluice_numeric", "numpy_shm", "numpy_pipe"], "sluice_numeric"),
    ("Training the CTR example (examples/torch/train_ctr.py, one epoch)",
     ["torch_example", "torch_ctr_dataloader"], "torch_ctr_dataloader"),
]

TORCH_TARGET_TEXT = {
    "torch_sluice": "sluice → torch tensors ≥ 0.7× `--model none` on the string-heavy data",
    "numpy_shm": "sluice → numpy in Python processes ≥ 0.8× `--model none` on all-numeric data",
}


def torch_section(res):
    """The PyTorch tables: each reader's rows/s beside its base (the first line)."""
    named = {r["name"]: r for r in res["readers"]}
    if not any(n in named for _, names, _ in TORCH_TABLES for n in names[1:]):
        return []
    lines = ["## Into PyTorch", "",
             "The sluice → torch and sluice → numpy lines are timed by their trainers, from the "
             "first batch one received to the last (`bench/measure.py --trainer-timing`): "
             "their interpreters' start-up and imports are excluded, as the Python peers' are "
             "(the whole run's time is in results.json as `job_seconds`).", ""]
    for title, names, base in TORCH_TABLES:
        present = [named[n] for n in names if n in named]
        if len(present) < 2:
            continue
        b = named.get(base, {}).get("rows_per_second")
        lines += [f"### {title}", "", f"| reader | rows/s | ÷ {named.get(base, {}).get('label', base)} | peak RSS (MB) |",
                  "|---|---:|---:|---:|"]
        for r in present:
            if "rows_per_second" not in r:
                lines.append(f"| {r['label']} | not measured: {str(r.get('error', ''))[:120]} | | |")
                continue
            ratio = f"{r['rows_per_second'] / b:.2f}×" if b else ""
            lines.append(f"| {r['label']} | {r['rows_per_second']:,.0f} | {ratio} | {r['peak_rss_mb']:.0f} |")
        lines.append("")
    wanted = [t for t in res.get("torch_targets", []) if t.get("wanted")]
    if wanted:
        lines += ["Targets:", ""]
        for t in wanted:
            text = TORCH_TARGET_TEXT.get(t["reader"], t["reader"])
            if t["status"] == "not measured":
                lines.append(f"- **not measured**: {text} ({t['reason'].strip().splitlines()[-1][:160]})")
            else:
                word = "met" if t["status"] == "met" else "**not met**"
                lines.append(f"- {word}: {text}: measured {t['measured']:.2f}×")
        lines.append("")
    return lines


def by_name(res, name):
    return next((r for r in res["readers"] if r["name"] == name and "rows_per_second" in r), None)


def util(r):
    """Cores kept busy on average (CPU seconds of the process and its waited children / wall)."""
    return r["cpu_seconds"] / r["wall_seconds"] if r.get("wall_seconds") else 0.0


def bounds(res, prof):
    """For every target not met, what bounds it: from the figures and the profile."""
    sl, de, pa = by_name(res, "sluice"), by_name(res, "decode"), by_name(res, "pyarrow")
    if not sl:
        return []
    cat = (prof or {}).get("categories", {}).get("sluice", {})
    incl = {t["symbol"]: t["percent"] for t in (prof or {}).get("sluice_inclusive", [])}
    batcher = max([v for k, v in incl.items() if "Batcher::push" in k] or [0.0])
    out = []
    for t in res["targets"]:
        if t["status"] != "not met":
            continue
        text = TARGET_TEXT[(t["peer"], t["what"])]
        if t["peer"] in ("decode", "decode_view"):
            dt = by_name(res, t["peer"]) or de
            line = (f"- *{text}*: sluice reads at {fmt_rate(sl['rows_per_second'])} rows/s, the bare decode at "
                    f"{fmt_rate(dt['rows_per_second'])}. sluice spent {sl['cpu_seconds']:.2f} CPU-s for the rows "
                    f"against the bare decode's {dt['cpu_seconds']:.2f} (+{100 * (sl['cpu_seconds'] / dt['cpu_seconds'] - 1):.0f}%), "
                    f"and kept {util(sl):.2f} of its 2 cores busy against {util(dt):.2f}.")
            if prof:
                line += (f" In the profile, re-cutting batches to exactly {res['settings']['batch_size']} rows "
                         f"(`Batcher::push` → `arrow_select::concat`, on the coordinator's single thread) takes "
                         f"{batcher:.1f}% of sluice's CPU, page faults on freshly allocated read buffers "
                         f"{cat.get('kernel: page faults/memory', 0):.1f}% (the bare decode: "
                         f"{prof['categories'].get('decode', {}).get('kernel: page faults/memory', 0):.1f}%); the rest is the "
                         "same parquet decoding as the bare decode.")
            out.append(line)
        elif t["what"] == "rows/s":
            peer = by_name(res, t["peer"])
            need = t["wanted"] * peer["rows_per_second"]
            if de and need > de["rows_per_second"]:
                dv = by_name(res, "decode_view")
                line = (f"- *{text}*: that needs {fmt_rate(need)} rows/s, more than the bare decode of the same "
                        f"files ({fmt_rate(de['rows_per_second'])} rows/s, "
                        f"{de['rows_per_second'] / peer['rows_per_second']:.1f}× this peer): out of reach of the "
                        "parquet crate's decode to Utf8 on 2 cores, whatever sluice does around it. The decoding "
                        "itself bounds it (snappy, dictionary and offset buffers of the 26 string columns, memcpy: "
                        "see the profile).")
                if dv:
                    line += (f" Decoding strings to Utf8View instead reads {fmt_rate(dv['rows_per_second'])} rows/s "
                             f"({dv['rows_per_second'] / peer['rows_per_second']:.1f}× this peer).")
                out.append(line)
            else:
                out.append(f"- *{text}*: that needs {fmt_rate(need)} rows/s; the bare decode reaches "
                           f"{fmt_rate(de['rows_per_second']) if de else '?'}, so the gap is sluice's pipeline "
                           "(see the bare decode target).")
        else:
            d = res["dataset"]
            rg = d["parquet_bytes"] / d["row_groups"] / 1e6
            rga = d["arrow_bytes"] / d["row_groups"] / 1e6
            out.append(f"- *{text}*: sluice peaked at {sl['peak_rss_mb']:.0f} MB, pyarrow.dataset at "
                       f"{pa['peak_rss_mb']:.0f} MB, the bare decode at {de['peak_rss_mb']:.0f} MB. sluice leases "
                       f"`--prefetch` 4 tasks ahead and reads each task's row group whole into freshly allocated "
                       f"buffers ({rg:.0f} MB of compressed column chunks here, {rga:.0f} MB once decoded), each "
                       "reader running ahead into a channel of decoded batches, so several row groups are in memory "
                       "at once, and the allocator keeps what the reader threads free for reuse (the bare decode "
                       "holds one row group per thread). See the analysis below for measured variants.")
    return out


def main():
    d = sys.argv[1]
    res = json.load(open(os.path.join(d, "results.json")))
    charted = chart(res, os.path.join(d, "chart.png")) is not False
    ds, m = res["dataset"], res["machine"]
    s = res["settings"]
    lines = [
        "# sluice benchmark",
        "",
        f"{res['date']}, commit {m['commit']}" + (" — **quick run (`--quick`): small data, one repetition, not a measurement**" if res["quick"] else ""),
        "",
        f"Dataset: Criteo-like, written by Spark (`bench/make_dataset.py`): {ds['rows']:,} rows, "
        f"{ds['columns']} columns (`label`, `I1`–`I13` int, `C1`–`C26` hex strings), "
        f"{ds['files']} snappy Parquet files, {ds['row_groups']} row groups, "
        f"{ds['parquet_bytes'] / 1e6:.0f} MB on disk, {ds['arrow_bytes'] / 1e6:.0f} MB as Arrow.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_mb'] // 1024} GiB; every reader alone, pinned to cores "
        f"{s['cpus']}, 2 devices/threads/workers, batches of {s['batch_size']} rows, all columns; "
        f"median of up to {s['repetitions']} runs. Seconds are each reader's own (listing/opening to the last "
        "batch; sluice: its run summary; Python start-up and imports excluded). MB/s = on-disk Parquet bytes ÷ "
        "seconds. Peak RSS = the peak of the summed PSS of the reader's whole process tree (workers, Ray's "
        "daemons included), sampled every 50 ms. The local runs read from the page cache.",
        "",
    ]
    other = res.get("max_other_cores")
    if other is not None and other > 0.1:
        lines += [f"**The machine was busy**: other processes used up to {other:.2f} of the 2 cores while a "
                  f"reader ran (load average up to {res.get('max_loadavg_before_a_reader') or 0:.1f} before one "
                  "started), so some figures are low and noisy. Rerun `bench/run.sh` on an idle machine for "
                  "authoritative figures.", ""]
    for g in ("local", "s3"):
        if any(r["group"] == g for r in res["readers"]):
            lines += [f"## {GROUP_TITLE[g]}", "", table(res, g), ""]
            moto = [r.get("other_cores", 0) for r in res["readers"] if r["group"] == g and "other_cores" in r]
            if g == "s3" and moto:
                lines += [f"moto is a Python server on the same 2 cores: it used up to {max(moto):.1f} of them "
                          "while serving these runs, so it bounds both readers here; the figures say more about "
                          "the emulator than about S3.", ""]
    if charted:
        lines += ["![rows/s and peak RSS](chart.png)", ""]
    lines += ["## Targets (2 cores)", "", targets(res), ""]
    lines += torch_section(res)
    prof_json = os.path.join(d, "profile.json")
    b = bounds(res, json.load(open(prof_json)) if os.path.exists(prof_json) else None)
    if b:
        lines += ["What bounds the targets not met:", ""] + b + [""]
    if os.path.exists(prof_json):
        p = json.load(open(prof_json))
        lines += ["## What bounds sluice (perf profile)", ""]
        lines += [p.get("summary", ""), ""]
        cats = p.get("categories", {})
        if cats:
            names = list(next(iter(cats.values())).keys())
            lines += ["| where the CPU goes (% of samples) | " + " | ".join(cats.keys()) + " |",
                      "|---|" + "---:|" * len(cats)]
            for n in names:
                lines.append(f"| {n} | " + " | ".join(f"{cats[k].get(n, 0):.1f}" for k in cats) + " |")
            lines += ["", "Details, top functions: [profile.md](profile.md).", ""]
    notes = os.path.join(d, "findings.md")
    if os.path.exists(notes):
        lines += [open(notes).read().strip(), ""]
    # bench/load writes its figures beside the full run's results.
    ld = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    load_md = os.path.join(ld, "load.md")
    if os.path.exists(os.path.join(ld, "load.json")) or os.path.exists(load_md):
        lines += ["## Master load (bench/load)", ""]
        if os.path.exists(load_md):
            body = open(load_md).read().strip().splitlines()
            if body and body[0].startswith("# "):
                body = body[1:]
            lines += ["\n".join(body).strip(), ""]
        else:
            lines += ["```json", json.dumps(json.load(open(os.path.join(ld, "load.json"))), indent=1)[:4000], "```", ""]
    lines += ["## Peers", ""]
    for name, st in res["peers"].items():
        lines.append(f"- {name}: {st}")
    lines += ["", "Raw numbers of every run: [results.json](results.json). Rerun: `bench/run.sh` "
              "(`--quick` for a fast check, `--rows N` for another size).", ""]
    with open(os.path.join(d, "report.md"), "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
