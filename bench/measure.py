"""Run one reader of the benchmark a few times and measure it.

    python3 bench/measure.py --name NAME --out FILE.jsonl [--reps 3] [--budget 150]
        [--cpus 0,1] [--summary-json F] [--bytes N] [--env K=V ...] -- CMD ARGS...

Each repetition runs CMD pinned to --cpus (taskset), samples the memory of its whole
process tree every 50 ms (the sum of PSS from /proc/PID/smaps_rollup over the process
and all its descendants, so forked workers' shared pages are not counted twice; the
sum of RSS beside it), and takes rows and seconds from the last JSON line CMD prints
on stdout (or from --summary-json, sluice's run summary). With --trainer-timing the
seconds are instead those sluice's exec trainers report on stderr (`{"trainer_timing":
{"device", "rows", "first", "last"}}`: from the first batch any of them received to
the last one), so their interpreter start-up and imports are excluded, as they are
for the Python peers; the run's whole time is kept as `job_seconds`. Repetitions stop at --reps,
or earlier once --budget seconds have been spent on this reader (at least one run).
Appends one JSON object per reader to --out: every repetition and the median one.
Only the standard library: runs under any python3.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time


def children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        ppid = int(s[s.rfind(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(root):
    kids = children_map()
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def mem_kb(pid):
    """(pss, rss) of one process in kB, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            pss = rss = 0
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1])
            return pss, rss
    except (OSError, ValueError):
        return None


class Sampler(threading.Thread):
    def __init__(self, pid, interval=0.05, rescan=0.5):
        super().__init__(daemon=True)
        self.pid, self.interval, self.rescan = pid, interval, rescan
        self.stop = threading.Event()
        self.peak_pss = self.peak_rss = self.max_procs = self.samples = 0
        self.cpu_seconds = 0.0

    def run(self):
        pids, scanned = [self.pid], 0.0
        while not self.stop.is_set():
            c0 = time.thread_time()
            now = time.monotonic()
            if now - scanned >= self.rescan:
                pids, scanned = tree(self.pid), now
            pss = rss = n = 0
            for p in pids:
                m = mem_kb(p)
                if m:
                    pss, rss, n = pss + m[0], rss + m[1], n + 1
            self.peak_pss, self.peak_rss = max(self.peak_pss, pss), max(self.peak_rss, rss)
            self.max_procs = max(self.max_procs, n)
            self.samples += 1
            self.cpu_seconds += time.thread_time() - c0
            self.stop.wait(self.interval)


def busy_seconds():
    """CPU seconds the whole machine has spent busy (not idle or iowait), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(v[:8]) - v[3] - v[4]) / hz


TIMING = re.compile(r'\{"trainer_timing": \{[^{}]*\}\}')


def trainer_span(err_text):
    """Seconds from the first batch any trainer received to the last one, and the
    trainers that reported; None when none did."""
    found = [json.loads(m)["trainer_timing"] for m in TIMING.findall(err_text)]
    if not found:
        return None
    return max(t["last"] for t in found) - min(t["first"] for t in found), len(found)


def run_once(cmd, env, cpus, summary_json, trainer_timing=False):
    if summary_json and os.path.exists(summary_json):
        os.remove(summary_json)
    full = (["taskset", "-c", cpus] if cpus else []) + cmd
    busy0 = busy_seconds()
    t0 = time.perf_counter()
    proc = subprocess.Popen(full, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    sampler = Sampler(proc.pid)
    sampler.start()
    out_lines, err_lines = [], []
    t_out = threading.Thread(target=lambda: out_lines.extend(proc.stdout), daemon=True)
    t_err = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)
    t_out.start()
    t_err.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    busy = busy_seconds() - busy0
    proc.returncode = os.waitstatus_to_exitcode(status)
    sampler.stop.set()
    sampler.join()
    t_out.join()
    t_err.join()
    rep = {
        "wall_seconds": wall,
        "exit": proc.returncode,
        "peak_pss_mb": sampler.peak_pss / 1024,
        "peak_rss_sum_mb": sampler.peak_rss / 1024,
        # The kernel's high-water mark of the largest single process of the tree.
        "maxrss_largest_process_mb": usage.ru_maxrss / 1024,
        "processes": sampler.max_procs,
        "samples": sampler.samples,
        "sampler_cpu_seconds": round(sampler.cpu_seconds, 3),
        "user_seconds": usage.ru_utime,
        "system_seconds": usage.ru_stime,
        # CPU the rest of the machine used meanwhile (everything busy minus this reader's
        # tree as far as the kernel has charged it), in cores: 0 on an idle machine.
        "other_cores": round(max(0.0, busy - usage.ru_utime - usage.ru_stime - sampler.cpu_seconds) / wall, 3),
    }
    if proc.returncode != 0:
        rep["error"] = "".join(err_lines[-15:]).strip()[-2000:] or f"exit {proc.returncode}"
        return rep
    try:
        if summary_json:
            with open(summary_json) as f:
                data = json.load(f)
            data = {"rows": data["rows"], "batches": data.get("batches"),
                    "seconds": data["seconds"], "tasks_done": data.get("tasks_done"),
                    "failed_tasks": len(data.get("tasks_failed") or [])}
        else:
            data = json.loads([l for l in out_lines if l.strip().startswith("{")][-1])
    except (OSError, IndexError, ValueError, KeyError) as e:
        rep["error"] = f"no result ({e}): " + "".join(err_lines[-10:]).strip()[-2000:]
        return rep
    if trainer_timing:
        span = trainer_span("".join(err_lines))
        if span is None:
            rep["error"] = "no trainer_timing line on stderr"
            return rep
        data["job_seconds"] = data["seconds"]
        data["seconds"], data["trainers_timed"] = span
    rep.update(data)
    return rep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--label", default=None)
    ap.add_argument("--group", default="local")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--budget", type=float, default=150.0)
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--summary-json")
    ap.add_argument("--bytes", type=int, default=0, help="on-disk Parquet bytes of the dataset")
    ap.add_argument("--expect-rows", type=int, default=0)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--trainer-timing", action="store_true",
                    help="seconds from the exec trainers' own timing lines on stderr")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    env = dict(os.environ)
    for kv in a.env:
        k, v = kv.split("=", 1)
        env[k] = v
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    reps, spent = [], 0.0
    for i in range(a.reps):
        r = run_once(cmd, env, a.cpus, a.summary_json, a.trainer_timing)
        reps.append(r)
        spent += r["wall_seconds"]
        msg = (f"{r['rows']} rows in {r['seconds']:.2f} s, peak {r['peak_pss_mb']:.0f} MB"
               if "error" not in r else "FAILED: " + r["error"].splitlines()[-1][:300])
        print(f"bench: {a.name} run {i + 1}: {msg}", file=sys.stderr)
        if "error" in r or spent >= a.budget:
            break
    ok = [r for r in reps if "error" not in r]
    res = {"name": a.name, "label": a.label or a.name, "group": a.group,
           "command": cmd, "cpus": a.cpus, "loadavg_before": load, "runs": reps}
    if ok:
        med = statistics.median_low([r["seconds"] for r in ok])
        m = next(r for r in ok if r["seconds"] == med)
        res.update({
            "rows": m["rows"], "seconds": med,
            "rows_per_second": m["rows"] / med,
            "mb_per_second": a.bytes / 1e6 / med if a.bytes else None,
            "peak_rss_mb": statistics.median([r["peak_pss_mb"] for r in ok]),
            "maxrss_largest_process_mb": statistics.median(
                [r["maxrss_largest_process_mb"] for r in ok]),
            "wall_seconds": m["wall_seconds"],
            "cpu_seconds": m["user_seconds"] + m["system_seconds"],
            "other_cores": max(r["other_cores"] for r in ok),
        })
        if "job_seconds" in m:
            res["job_seconds"] = m["job_seconds"]
        if a.expect_rows and m["rows"] != a.expect_rows:
            res["error"] = f"read {m['rows']} rows, the dataset has {a.expect_rows}"
    else:
        res["error"] = reps[-1]["error"]
    with open(a.out, "a") as f:
        f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
