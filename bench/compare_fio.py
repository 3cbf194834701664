#!/usr/bin/python3
"""Driver for bench/compare-fio.sh: run fio and `feedline bench storage` alternately on one file.

Standard library only (runs under Debian's /usr/bin/python3). Normally started by compare-fio.sh,
which fills in defaults, installs fio and lays out the test file.

For each job it runs fio, feedline, fio, feedline, ... (--pairs pairs), then prints per job the
median of each tool, the ratio ours/fio and PASS/FAIL against the targets. CPU is measured the same
way for both tools: user+sys time of the child (getrusage(RUSAGE_CHILDREN) deltas around the run),
divided by the IOs the tool reports.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

# name: (rw, bs, direct, throughput metric, throughput target (ours/fio >=), description)
JOBS = {
    "seq": ("read", "1M", True, "bandwidth", 0.97, "sequential 1 MiB reads, QD32, O_DIRECT, io_uring"),
    "rand": ("randread", "4k", True, "iops", 0.97, "random 4 KiB reads, QD32, O_DIRECT, io_uring"),
    "warm": ("read", "1M", False, "bandwidth", 0.90, "sequential 1 MiB buffered reads, warm page cache"),
    "files": ("read", "4k", True, "iops", 0.97,
              "small files of 4 KiB read once each, QD32, O_DIRECT, cold cache; iops = files/s"),
}
# The files job's extra feedline row: the same files in name order (--no-shuffle), for information.
SORTED = "feedline --no-shuffle"
CPU_TARGET = 1.10  # CPU seconds per IO, ours/fio <=
IODEPTH = 32


class ToolFailure(Exception):
    pass


def fio_cmd(a, job):
    rw, bs, direct, _, _, _ = JOBS[job]
    if job == "files":
        # fio's fastest setting for many small files here (see compare-fio.sh): a bounded set of
        # open files, each read through before the next. Not time based: every file once.
        return [a.fio, "--name=files", f"--opendir={a.files_dir}", "--readonly",
                "--output-format=json", f"--rw={rw}", f"--bs={bs}", "--ioengine=io_uring",
                "--direct=1", f"--iodepth={IODEPTH}", "--openfiles=256",
                "--file_service_type=sequential", "--iomem_align=4096"]
    cmd = [a.fio, f"--name={job}", f"--filename={a.file}", f"--size={a.size}", "--readonly",
           "--time_based", f"--runtime={a.runtime}", "--output-format=json",
           f"--rw={rw}", f"--bs={bs}", "--ioengine=io_uring", f"--direct={1 if direct else 0}",
           f"--iodepth={IODEPTH}", "--iomem_align=4096"]
    if direct:
        # Same settings as feedline, which registers its buffers for direct I/O (and only there:
        # page-cache copies into registered buffers are slower on this kernel).
        cmd.append("--fixedbufs=1")
    else:
        cmd.append("--invalidate=0")  # keep the warm page cache
    return cmd


def feedline_cmd(a, job, sorted_order=False):
    rw, bs, direct, _, _, _ = JOBS[job]
    if job == "files":
        cmd = [a.feedline, "run", a.files_dir, "--format", "files", "--direct", "--io-depth",
               str(IODEPTH), "--epochs", "1", "--json", run_json(a)]
        return cmd + (["--no-shuffle"] if sorted_order else [])
    cmd = [a.feedline, "bench", "storage", a.file, "--rw", rw, "--bs", bs, "--iodepth", str(IODEPTH)]
    if direct:
        cmd.append("--direct")
    cmd += ["--engine", "uring", "--size", a.size, "--runtime", f"{a.runtime}s", "--time-based",
            "--output", "json"]
    return cmd


def run_child(cmd, timeout):
    """Run cmd; return (stdout, user+sys seconds of the child, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolFailure(f"timed out after {timeout} s: {' '.join(cmd)}")
    except OSError as e:
        raise ToolFailure(f"could not start {cmd[0]}: {e}")
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise ToolFailure(f"exit status {p.returncode}: {' '.join(cmd)}\n"
                          f"stderr: {p.stderr.strip()[-2000:]}\nstdout: {p.stdout.strip()[-1000:]}")
    user = after.ru_utime - before.ru_utime
    system = after.ru_stime - before.ru_stime
    return p.stdout, p.stderr, user, system, wall


def parse_json(text, tool):
    start = text.find("{")  # fio may print notes before its JSON
    if start < 0:
        raise ToolFailure(f"{tool} printed no JSON: {text.strip()[-1000:]}")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as e:
        raise ToolFailure(f"{tool} printed unparsable JSON ({e}): {text.strip()[-1000:]}")
    return obj


def fio_run(a, job):
    cmd = fio_cmd(a, job)
    out, err, user, system, wall = run_child(cmd, 600 if job == "files" else a.runtime + 120)
    d = parse_json(out, "fio")
    try:
        j = d["jobs"][0]
        r = j["read"]
        if j.get("error", 0):
            raise ToolFailure(f"fio job error {j['error']}: {err.strip()[-1000:]}")
        ios = int(r["total_ios"])
        pct = r["clat_ns"].get("percentile", {})
        rec = {
            "bandwidth": float(r["bw_bytes"]),
            "iops": float(r["iops"]),
            "ios": ios,
            "bytes": int(r["io_bytes"]),
            "seconds": r["runtime"] / 1000.0,
            "clat_p50_ns": pct.get("50.000000"),
            "clat_p99_ns": pct.get("99.000000"),
            "lat_mean_ns": r["lat_ns"].get("mean"),
            "self_reported_cpu_pct": {"usr": j.get("usr_cpu"), "sys": j.get("sys_cpu")},
            "device_read_ios": sum(du.get("read_ios", 0) for du in d.get("disk_util", [])),
            # fio's own account: usr_cpu+sys_cpu are percent of the job's runtime (no start-up)
            "self_cpu_seconds_per_io": (j["usr_cpu"] + j["sys_cpu"]) / 100.0
                                       * (j["job_runtime"] / 1000.0) / ios if ios else None,
        }
    except (KeyError, IndexError, TypeError) as e:
        raise ToolFailure(f"fio JSON lacks an expected field ({e!r})")
    return finish(rec, user, system, wall, "fio")


def run_json(a):
    return a.out + ".run.json"


def feedline_files_run(a, job, sorted_order=False):
    """`feedline run` over the small files: files/s of its own clock (after the listing)."""
    out, err, user, system, wall = run_child(feedline_cmd(a, job, sorted_order), 600)
    try:
        with open(run_json(a)) as fh:
            d = json.load(fh)
    except (OSError, ValueError) as e:
        raise ToolFailure(f"feedline wrote no readable --json report ({e})")
    try:
        io = d["io"]
        if d.get("error") or io.get("errors", 0):
            raise ToolFailure(f"feedline reported errors: {d.get('error')} ({io.get('errors')} reads)")
        rec = {
            "iops": float(d["samples_per_second"]),
            "bandwidth": float(d.get("bytes_per_second", 0.0)),
            "ios": int(d["samples"]),
            "seconds": float(d["wall_seconds"]),
            "clat_p50_ns": io["clat_ns"].get("p50"),
            "clat_p99_ns": io["clat_ns"].get("p99"),
            "mean_in_flight": io.get("mean_in_flight"),
            "storage_threads": io.get("storage_threads"),
            "self_cpu_seconds_per_io": None,
        }
    except (KeyError, TypeError, ValueError) as e:
        raise ToolFailure(f"feedline JSON lacks an expected field ({e!r})")
    return finish(rec, user, system, wall, "feedline")


def drop_caches():
    """Drop the page cache, dentries and inodes (root only); True when done."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


def feedline_run(a, job):
    if job == "files":
        return feedline_files_run(a, job)
    cmd = feedline_cmd(a, job)
    out, err, user, system, wall = run_child(cmd, a.runtime + 120)
    d = parse_json(out, "feedline")
    try:
        if d.get("errors", 0):
            raise ToolFailure(f"feedline reported {d['errors']} read errors")
        rec = {
            "bandwidth": float(d["bandwidth_bytes_per_second"]),
            "iops": float(d["iops"]),
            "ios": int(d["ios"]),
            "bytes": int(d["bytes"]),
            "seconds": float(d["seconds"]),
            "clat_p50_ns": d["clat_ns"].get("p50"),
            "clat_p99_ns": d["clat_ns"].get("p99"),
            "lat_p50_ns": d["latency_ns"].get("p50"),
            "lat_p99_ns": d["latency_ns"].get("p99"),
            "lat_mean_ns": d["latency_ns"].get("mean"),
            "self_reported_cpu_seconds": d.get("cpu"),
            # feedline's own account (getrusage inside the run loop, no start-up)
            "self_cpu_seconds_per_io": d.get("cpu_seconds_per_io"),
            "engine_features": d.get("engine_features"),
            "device_read_bytes": (d.get("device") or {}).get("read_bytes"),
            "notes": d.get("notes"),
        }
    except (KeyError, TypeError) as e:
        raise ToolFailure(f"feedline JSON lacks an expected field ({e!r})")
    return finish(rec, user, system, wall, "feedline")


def finish(rec, user, system, wall, tool):
    if rec["ios"] <= 0:
        raise ToolFailure(f"{tool} reported no IOs")
    rec["cpu_user_seconds"] = user
    rec["cpu_sys_seconds"] = system
    rec["cpu_seconds"] = user + system
    rec["cpu_seconds_per_io"] = (user + system) / rec["ios"]
    rec["wall_seconds"] = wall
    return rec


def warm_cache(path, nbytes):
    """Read the first nbytes of path once so the buffered job starts from a warm page cache."""
    t0 = time.monotonic()
    left = nbytes
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        while left > 0:
            n = f.readinto(view[:min(len(buf), left)])
            if not n:
                break
            left -= n
    return time.monotonic() - t0


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def fmt_value(metric, v):
    if v is None:
        return "-"
    if metric == "bandwidth":
        return f"{v / 1e9:.2f} GB/s"
    if metric == "iops":
        return f"{v / 1e3:.1f}k IOPS"
    if metric == "cpu/IO":
        return f"{v * 1e6:.2f} us"
    if v >= 10e6:  # latencies in ns
        return f"{v / 1e6:.1f} ms"
    return f"{v / 1e3:.0f} us"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", required=True)
    ap.add_argument("--size", default="1g")
    ap.add_argument("--size-bytes", type=int, required=True)
    ap.add_argument("--runtime", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--jobs", default="seq,rand,warm")
    ap.add_argument("--feedline", required=True)
    ap.add_argument("--fio", default="fio")
    ap.add_argument("--out", required=True)
    ap.add_argument("--files-dir", default="")
    a = ap.parse_args()
    jobs = [j for j in a.jobs.split(",") if j]
    for j in jobs:
        if j not in JOBS:
            ap.error(f"unknown job {j}")

    fio_version = subprocess.run([a.fio, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    print(f"compare-fio: {a.file} size={a.size} runtime={a.runtime}s pairs={a.pairs} "
          f"jobs={','.join(jobs)}\n  fio: {a.fio} ({fio_version})\n  feedline: {a.feedline}",
          file=sys.stderr, flush=True)

    report = {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release(),
        "file": a.file, "size": a.size, "runtime_seconds": a.runtime, "pairs": a.pairs,
        "fio": {"path": a.fio, "version": fio_version}, "feedline": {"path": a.feedline},
        "cpu_measure": "user+sys of the child process, getrusage(RUSAGE_CHILDREN) deltas, / IOs",
        "jobs": {}, "table": [],
    }
    rows = []
    try:
        for job in jobs:
            rw, bs, direct, metric, thr_target, desc = JOBS[job]
            jr = {"description": desc, "fio_cmd": fio_cmd(a, job), "feedline_cmd": feedline_cmd(a, job),
                  "fio": [], "feedline": []}
            report["jobs"][job] = jr
            if not direct:
                secs = warm_cache(a.file, a.size_bytes)
                jr["warmup_seconds"] = secs
                print(f"[{job}] warmed the page cache ({a.size} in {secs:.2f} s)", file=sys.stderr,
                      flush=True)
            tools = [("fio", fio_run), ("feedline", feedline_run)]
            if job == "files":
                jr["feedline_sorted_cmd"] = feedline_cmd(a, job, True)
                jr[SORTED] = []
                tools.append((SORTED, lambda a, job: feedline_files_run(a, job, True)))
            for i in range(a.pairs):
                for tool, fn in tools:
                    if job == "files":
                        jr.setdefault("cold", []).append(drop_caches())
                    rewarm = None
                    if not direct:
                        # Re-read before every run: cheap when the cache is warm, and it undoes any
                        # eviction (memory pressure, DAMON reclaim) since the previous run.
                        rewarm = warm_cache(a.file, a.size_bytes)
                    rec = fn(a, job)
                    if rewarm is not None:
                        rec["rewarm_seconds"] = rewarm
                    jr[tool].append(rec)
                    print(f"[{job}] pair {i + 1}/{a.pairs} {tool:21s} {fmt_value(metric, rec[metric]):>14s}"
                          f"  cpu/IO {fmt_value('cpu/IO', rec['cpu_seconds_per_io']):>10s}"
                          f"  clat p50 {fmt_value('lat', rec['clat_p50_ns'])} p99 {fmt_value('lat', rec['clat_p99_ns'])}",
                          file=sys.stderr, flush=True)
            f, o = jr["fio"], jr["feedline"]

            def row(m, key, target, op, ours=o):
                fv, ov = med(f, key), med(ours, key)
                ratio = ov / fv if fv and ov is not None else None
                if target is None:
                    status, tstr = "info", "-"
                elif ratio is None:
                    status, tstr = "FAIL", f"{op}{target:.2f}"
                else:
                    ok = ratio >= target if op == ">=" else ratio <= target
                    status, tstr = ("PASS" if ok else "FAIL"), f"{op}{target:.2f}"
                r = {"job": job, "metric": m, "fio_median": fv, "feedline_median": ov, "ratio": ratio,
                     "target": tstr, "status": status,
                     "fio_runs": [x.get(key) for x in f], "feedline_runs": [x.get(key) for x in ours]}
                rows.append(r)

            row(metric, metric, thr_target, ">=")
            if job == "files":
                row(f"{metric} sorted", metric, None, "", ours=jr[SORTED])
                if not all(jr["cold"]):
                    print(f"[{job}] note: the caches could not be dropped (not root): dentries and "
                          "inodes were warm; the data reads are O_DIRECT either way", file=sys.stderr)
            row("cpu/IO", "cpu_seconds_per_io", CPU_TARGET, "<=")
            row("cpu/IO self", "self_cpu_seconds_per_io", None, "")
            row("clat p50", "clat_p50_ns", None, "")
            row("clat p99", "clat_p99_ns", None, "")
            if not direct:
                dev = [x.get("device_read_bytes") for x in o]
                fdev = [x.get("device_read_ios") for x in f]
                if (any(d and d > 0.01 * x["bytes"] for d, x in zip(dev, o))
                        or any(n and n > 0.01 * x["ios"] for n, x in zip(fdev, f))):
                    print(f"[{job}] note: device reads during the warm job (feedline bytes {dev}, "
                          f"fio IOs {fdev}): the page cache was not fully warm", file=sys.stderr)
    except ToolFailure as e:
        report["failure"] = str(e)
        report["table"] = rows
        with open(a.out, "w") as fh:
            json.dump(report, fh, indent=2)
        print(f"compare-fio: tool failure: {e}", file=sys.stderr)
        return 1

    report["table"] = rows
    report["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with open(a.out, "w") as fh:
        json.dump(report, fh, indent=2)

    header = f"{'job':5s} {'metric':11s} {'fio(median)':>14s} {'feedline(median)':>17s} {'ratio':>6s}  {'target':7s} {'':4s}"
    print()
    print(header)
    print("-" * len(header))
    for r in rows:
        m = r["metric"]
        kind = ("cpu/IO" if m.startswith("cpu/IO") else m.split()[0]
                if m.split()[0] in ("bandwidth", "iops") else "lat")
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"{r['job']:5s} {m:11s} {fmt_value(kind, r['fio_median']):>14s} "
              f"{fmt_value(kind, r['feedline_median']):>17s} {ratio:>6s}  {r['target']:7s} {r['status']}")
    graded = [r for r in rows if r["status"] != "info"]
    passed = sum(r["status"] == "PASS" for r in graded)
    print(f"\n{passed}/{len(graded)} targets met (ratios are ours/fio; cpu/IO and latency: lower is better)")
    print("cpu/IO: user+sys of the whole child process (start-up included), the same for both tools;\n"
          "cpu/IO self: each tool's own account of its run (fio: usr_cpu+sys_cpu x job_runtime;\n"
          "feedline: cpu_seconds_per_io), for information")
    print(f"raw runs and table: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
