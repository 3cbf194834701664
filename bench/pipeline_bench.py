#!/usr/bin/python3
"""Driver for bench/pipeline.sh: the pipeline's "Numbers to reach", measured side by side.

Standard library only (runs under Debian's /usr/bin/python3). Normally started by pipeline.sh,
which fills in defaults and installs zstd.

Jobs, each on its own dataset under --dir (generated once with `feedline gen`, reused while the
.stamp next to it matches the generation parameters):
  efficiency  `feedline run --stages-alone`: end-to-end samples/s against the slowest stage alone,
              measured in the same process right after the end-to-end run, on a zstd tar dataset
              and an uncompressed files dataset. The runs alternate the two datasets.
  decode      zstd -d -T1 (A) and `feedline run --decode-threads T --stages-alone` (B) alternately;
              the decode stage alone in decoded bytes/s against T x zstd's single-thread rate.
  accounting  `feedline run --no-accounting` (A) and `feedline run` (B) alternately; samples/s.
  smallfiles  a Python ThreadPoolExecutor reading every file (A) and `feedline run` (B)
              alternately; files/s of the read phase (listing excluded for both).

Every child's user+sys CPU is taken from getrusage(RUSAGE_CHILDREN) deltas, and the CPU that other
processes used meanwhile from /proc/stat, because this is often a shared machine: the "others"
figure says how much a run was disturbed.

Also runnable as `pipeline_bench.py --py-reader DIR --threads T`: the Python side of smallfiles.
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

KiB = 1024
MiB = 1024 * 1024

TARGETS = {"efficiency": 0.90, "decode": 0.90, "accounting": 0.98, "smallfiles": 3.00}


class ToolFailure(Exception):
    pass


# --- the Python side of smallfiles -----------------------------------------------------------------

# feedline gen's manifest (written last; not a sample): neither reader counts it.
MANIFEST = ".feedline-dataset"

def py_reader(argv):
    """List DIR (not timed as the read phase), shuffle, then read every file with a thread pool."""
    ap = argparse.ArgumentParser(prog="pipeline_bench.py --py-reader")
    ap.add_argument("--py-reader", dest="root", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    t0 = time.monotonic()
    paths = []
    for dirpath, dirnames, filenames in os.walk(a.root):
        dirnames.sort()
        paths.extend(os.path.join(dirpath, f) for f in filenames if f != MANIFEST)
    paths.sort()
    random.Random(a.seed).shuffle(paths)  # a DataLoader with shuffle=True
    t1 = time.monotonic()

    def getitem(path):  # a map-style Dataset's __getitem__: open and read the whole file
        with open(path, "rb") as f:
            return f.read()

    files = 0
    nbytes = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.threads) as ex:
        for data in ex.map(getitem, paths):
            files += 1
            nbytes += len(data)
    t2 = time.monotonic()
    json.dump({"files": files, "bytes": nbytes, "list_seconds": t1 - t0, "read_seconds": t2 - t1,
               "files_per_second": files / (t2 - t1) if t2 > t1 else 0.0}, sys.stdout)
    print()
    return 0


# --- measuring children ----------------------------------------------------------------------------

def cpu_busy_seconds():
    """Busy CPU seconds of the whole machine so far (all CPUs; /proc/stat, not idle or iowait)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        ticks = [int(x) for x in fields[1:]]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_child(cmd, timeout=3600, stdout=subprocess.PIPE):
    """Run cmd; return a dict with stdout, stderr, user/sys CPU of the child, wall, others' CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0 = cpu_busy_seconds()
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolFailure(f"timed out after {timeout} s: {' '.join(cmd)}")
    except OSError as e:
        raise ToolFailure(f"could not start {cmd[0]}: {e}")
    wall = time.monotonic() - t0
    busy1 = cpu_busy_seconds()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise ToolFailure(f"exit status {p.returncode}: {' '.join(cmd)}\n"
                          f"stderr: {(p.stderr or '').strip()[-2000:]}\n"
                          f"stdout: {(p.stdout or '').strip()[-1000:]}")
    user = after.ru_utime - before.ru_utime
    system = after.ru_stime - before.ru_stime
    others = None
    if busy0 is not None and busy1 is not None and wall > 0:
        # CPU the rest of the machine used meanwhile, in cores (the driver itself only waits).
        others = max(0.0, (busy1 - busy0) - (user + system)) / wall
    return {"stdout": p.stdout or "", "stderr": p.stderr or "", "cpu_user_seconds": user,
            "cpu_sys_seconds": system, "cpu_seconds": user + system, "wall_seconds": wall,
            "minor_faults": after.ru_minflt - before.ru_minflt,
            "others_cores": others, "loadavg1_before": load0}


def child_summary(c):
    return {k: c[k] for k in ("cpu_user_seconds", "cpu_sys_seconds", "cpu_seconds", "wall_seconds",
                              "minor_faults", "others_cores", "loadavg1_before")}


def parse_json(text, tool):
    start = text.find("{")
    if start < 0:
        raise ToolFailure(f"{tool} printed no JSON: {text.strip()[-1000:]}")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as e:
        raise ToolFailure(f"{tool} printed unparsable JSON ({e}): {text.strip()[-1000:]}")
    return obj


# --- datasets --------------------------------------------------------------------------------------

def dataset_specs(a):
    """name -> (gen arguments, samples). Names carry the sample count so --quick and full coexist."""
    q = a.quick
    n_eff = 4000 if q else 20000
    n_dec = 1000 if q else 5000
    n_acc = 20000 if q else 50000
    n_small = min(a.files, 20000) if q else a.files
    specs = {
        "eff-tar": (["--format", "tar", "--samples", str(n_eff), "--sample-size", "64KiB",
                     "--compress", "zstd:3", "--compressibility", "0.5"], n_eff),
        "eff-files": (["--format", "files", "--samples", str(n_eff), "--sample-size", "64KiB"], n_eff),
        "dec-zst": (["--format", "files", "--samples", str(n_dec), "--sample-size", "256KiB",
                     "--compress", "zstd:3", "--compressibility", "0.5"], n_dec),
        "acc-tar": (["--format", "tar", "--samples", str(n_acc), "--sample-size", "4KiB"], n_acc),
        "small-files": (["--format", "files", "--samples", str(n_small),
                         "--sample-size", "uniform:4KiB:128KiB"], n_small),
    }
    return {f"{k}-{n}": (args, n) for k, (args, n) in specs.items()}


def list_files(root):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        out.extend(os.path.join(dirpath, f) for f in filenames if f != MANIFEST)
    out.sort()
    return out


def prepare(a, name, gen_args, zstd_concat=False):
    """Generate DIR/name once; return its stamp (gen summary and, for zstd_concat, the concatenation)."""
    root = os.path.join(a.dir, name)
    stamp_path = os.path.join(a.dir, name + ".stamp")
    want = {"gen_args": gen_args, "zstd_concat": zstd_concat}
    try:
        with open(stamp_path) as f:
            stamp = json.load(f)
        if all(stamp.get(k) == v for k, v in want.items()) and os.path.isdir(root) and \
                (not zstd_concat or os.path.isfile(stamp.get("concat_path", ""))):
            print(f"[data] reusing {root}", file=sys.stderr, flush=True)
            return stamp
    except (OSError, ValueError):
        pass
    # Parameters changed or the dataset is incomplete: start over (only our own named folder).
    if os.path.exists(stamp_path):
        os.remove(stamp_path)
    shutil.rmtree(root, ignore_errors=True)
    concat = os.path.join(a.dir, name + ".all.zst")
    if os.path.exists(concat):
        os.remove(concat)
    print(f"[data] generating {root}: feedline gen {' '.join(gen_args)}", file=sys.stderr, flush=True)
    c = run_child([a.feedline, "gen", root, *gen_args, "--output", "json"])
    stamp = dict(want)
    stamp["feedline_gen"] = parse_json(c["stdout"], "feedline gen")
    stamp["gen_seconds"] = c["wall_seconds"]
    if zstd_concat:
        # All the .zst samples as one stream of concatenated frames, for `zstd -d` to decompress.
        files = [p for p in list_files(root) if p.endswith(".zst")]
        if not files:
            raise ToolFailure(f"{root} holds no .zst files")
        with open(concat, "wb") as out:
            for p in files:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        # Decoded size, counted once (not timed), checked against what gen says it wrote.
        p = subprocess.Popen([a.zstd, "-d", "-q", "-c", concat], stdout=subprocess.PIPE)
        decoded = 0
        while True:
            chunk = p.stdout.read(1 << 20)
            if not chunk:
                break
            decoded += len(chunk)
        if p.wait() != 0:
            raise ToolFailure(f"zstd -d failed on {concat}")
        if decoded != stamp["feedline_gen"].get("bytes_decoded"):
            raise ToolFailure(f"zstd decoded {decoded} bytes from {concat} but feedline gen reports "
                              f"{stamp['feedline_gen'].get('bytes_decoded')}")
        stamp.update({"concat_path": concat, "concat_files": len(files),
                      "concat_bytes": os.path.getsize(concat), "decoded_bytes": decoded})
    with open(stamp_path, "w") as f:
        json.dump(stamp, f, indent=2)
    return stamp


def warm_cache(paths):
    """Read every file once so the next run starts from a warm page cache; returns seconds."""
    t0 = time.monotonic()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    for root in paths:
        files = list_files(root) if os.path.isdir(root) else [root]
        for p in files:
            with open(p, "rb", buffering=0) as f:
                while f.readinto(view):
                    pass
    return time.monotonic() - t0


def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        raise ToolFailure(f"--cold: cannot drop the page cache ({e}); it needs root")


# --- feedline runs ---------------------------------------------------------------------------------

def feedline_run(a, tmp, args, tag):
    """`feedline run ARGS --json FILE`; returns (record, full JSON document)."""
    path = os.path.join(tmp, f"{tag}.json")
    cmd = [a.feedline, "run", *args, "--json", path]
    c = run_child(cmd)
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise ToolFailure(f"feedline wrote no readable JSON report ({e}): {' '.join(cmd)}")
    if doc.get("error") or doc.get("interrupted"):
        raise ToolFailure(f"feedline run reported error={doc.get('error')!r} "
                          f"interrupted={doc.get('interrupted')}: {' '.join(cmd)}")
    try:
        rec = {
            "samples": int(doc["samples"]),
            "samples_per_second": float(doc["samples_per_second"]),
            "bytes_per_second": float(doc["bytes_per_second"]),
            "wall_seconds_pipeline": float(doc["wall_seconds"]),
            "input_bound": doc.get("input_bound"),
            "bottleneck": doc.get("bottleneck"),
            "stages": [{k: s.get(k) for k in ("name", "threads", "busy_fraction", "starved_fraction",
                                                "blocked_fraction", "cpu_seconds", "items", "bytes")}
                       for s in doc.get("stages", [])],
            "accounting": doc.get("config", {}).get("accounting"),
            "digest": (doc.get("delivered") or {}).get("digest"),
        }
    except (KeyError, TypeError, ValueError) as e:
        raise ToolFailure(f"feedline JSON lacks an expected field ({e!r})")
    if "stages_alone" in doc:
        sa = doc["stages_alone"]
        rec["stages_alone"] = {
            s["stage"]: {"samples": s["samples"], "bytes": s["bytes"], "seconds": s["seconds"],
                         "samples_per_second": s["samples_per_second"],
                         "bytes_per_second": s["bytes"] / s["seconds"] if s["seconds"] > 0 else 0.0}
            for s in sa["stages"]}
        rec["slowest"] = sa["slowest"]
        rec["slowest_samples_per_second"] = sa["slowest_samples_per_second"]
        rec["efficiency"] = sa["efficiency"]
        rec["cpu_ceiling_samples_per_second"] = sa.get("cpu_ceiling_samples_per_second")
        rec["cpu_per_sample_us"] = sa.get("cpu_per_sample_us")
    rec.update(child_summary(c))
    rec["cmd"] = cmd
    if rec["samples"] <= 0:
        raise ToolFailure(f"feedline delivered no samples: {' '.join(cmd)}")
    return rec


# --- formatting ------------------------------------------------------------------------------------

def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def fmt_value(unit, v):
    if v is None:
        return "-"
    if unit == "B/s":
        return f"{v / 1e9:.2f} GB/s" if v >= 1e9 else f"{v / 1e6:.0f} MB/s"
    if unit == "cpu-us":
        return f"{v * 1e6:.2f} us"
    suffix = {"samples/s": "smp/s", "files/s": "files/s"}.get(unit, unit)
    if v >= 1e6:
        return f"{v / 1e6:.2f}M {suffix}"
    if v >= 1e4:
        return f"{v / 1e3:.1f}k {suffix}"
    return f"{v:.0f} {suffix}"


def others_note(recs):
    vals = [r.get("others_cores") for r in recs if r.get("others_cores") is not None]
    return f"{min(vals):.1f}-{max(vals):.1f}" if vals else "?"


def log_run(job, i, pairs, tool, text, rec):
    o = rec.get("others_cores")
    print(f"[{job}] pair {i + 1}/{pairs} {tool:22s} {text:>16s}  cpu {rec['cpu_seconds']:6.2f} s"
          f"  wall {rec['wall_seconds']:6.2f} s  faults {rec['minor_faults'] / 1e3:6.0f}k"
          f"  others {'?' if o is None else f'{o:.1f}'} cores",
          file=sys.stderr, flush=True)


# --- jobs ------------------------------------------------------------------------------------------

def job_efficiency(a, tmp, specs, report, rows, verdicts):
    names = [n for n in specs if n.startswith("eff-")]
    jr = report["jobs"]["efficiency"] = {
        "description": "end-to-end samples/s (no --compute-time) against the slowest stage alone "
                       "(--stages-alone, same process, right after the end-to-end run)",
        "datasets": {}}
    stamps = {n: prepare(a, n, specs[n][0]) for n in names}
    for n in names:
        jr["datasets"][n] = {"gen": stamps[n], "runs": []}
    for i in range(a.pairs):
        for n in names:  # tar, files, tar, files, ...
            root = os.path.join(a.dir, n)
            fmt = "tar" if "-tar-" in n else "files"
            warm = warm_cache([root])
            rec = feedline_run(a, tmp, [root, "--format", fmt, "--stages-alone",
                                        "--stages-alone-samples", str(specs[n][1])], f"eff-{n}-{i}")
            rec["rewarm_seconds"] = warm
            jr["datasets"][n]["runs"].append(rec)
            alone = " ".join(f"{k} {v['samples_per_second']:.0f}" for k, v in rec["stages_alone"].items())
            log_run("efficiency", i, a.pairs, f"{fmt} e2e {rec['samples_per_second']:.0f} | alone",
                    f"{alone}", rec)
    for n in names:
        runs = jr["datasets"][n]["runs"]
        fmt = "tar+zstd" if "-tar-" in n else "files"
        slowest = [r["slowest"] for r in runs]
        peer_label = "slowest alone (" + "/".join(sorted(set(slowest))) + ")"
        add_row(rows, "efficiency", f"{fmt} e2e", peer_label, "samples/s",
                [r["slowest_samples_per_second"] for r in runs], [r["samples_per_second"] for r in runs],
                TARGETS["efficiency"],
                extra={"per_run_efficiency": [r["efficiency"] for r in runs], "dataset": n,
                       "others_cores": [r["others_cores"] for r in runs]})
        if all(r.get("cpu_ceiling_samples_per_second") for r in runs):
            # What the cores allow when every stage needs CPU: cores / (CPU per sample of the
            # stages alone, added up). Info: the graded row is the definition.
            add_row(rows, "efficiency", f"{fmt} e2e (info)", "CPU ceiling of the stages", "samples/s",
                    [r["cpu_ceiling_samples_per_second"] for r in runs], [r["samples_per_second"] for r in runs],
                    None, extra={"cpu_per_sample_us": [r["cpu_per_sample_us"] for r in runs]})
        for st in runs[0]["stages_alone"]:
            used = runs[0]["stages_alone"][st]["samples"]
            add_row(rows, "efficiency", f"{fmt} {st} alone", f"({used} samples)", "samples/s", None,
                    [r["stages_alone"][st]["samples_per_second"] for r in runs], None)
        verdicts.append(("efficiency", fmt, median_run(runs)))


def job_decode(a, tmp, specs, report, rows, verdicts):
    (n,) = [n for n in specs if n.startswith("dec-")]
    stamp = prepare(a, n, specs[n][0], zstd_concat=True)
    root = os.path.join(a.dir, n)
    samples = specs[n][1]
    # Decode alone runs on samples cached in half the memory budget: make room for all of them.
    stored = stamp["feedline_gen"]["bytes_stored"] + samples * 4096
    budget_mib = max(1024, (2 * stored * 11 // 10) // MiB + 64)
    threads = sorted({1, a.threads})
    decoded = stamp["decoded_bytes"]
    zstd_version = subprocess.run([a.zstd, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    jr = report["jobs"]["decode"] = {
        "description": "decode stage alone (zstd + XXH3 digest of every member, --stages-alone) in "
                       "decoded bytes/s against T x single-thread `zstd -d -T1` on the same frames",
        "dataset": n, "gen": stamp, "zstd": {"path": a.zstd, "version": zstd_version},
        "zstd_cmd": [a.zstd, "-d", "-T1", "-q", "-c", stamp["concat_path"]], "memory_budget_mib": budget_mib,
        "zstd_runs": [], "feedline_runs": {str(t): [] for t in threads}}
    for i in range(a.pairs):
        warm = warm_cache([root, stamp["concat_path"]])
        c = run_child(jr["zstd_cmd"], stdout=subprocess.DEVNULL)
        rec = child_summary(c)
        rec["decoded_bytes"] = decoded
        rec["bytes_per_second"] = decoded / c["wall_seconds"]
        rec["bytes_per_cpu_second"] = decoded / c["cpu_seconds"] if c["cpu_seconds"] > 0 else None
        rec["rewarm_seconds"] = warm
        jr["zstd_runs"].append(rec)
        log_run("decode", i, a.pairs, "zstd -d -T1", fmt_value("B/s", rec["bytes_per_second"]), rec)
        for t in threads:
            warm = warm_cache([root])
            r = feedline_run(a, tmp, [root, "--format", "files", "--decode-threads", str(t),
                                      "--memory-budget", f"{budget_mib}MiB", "--stages-alone",
                                      "--stages-alone-samples", str(samples)], f"dec-{t}-{i}")
            r["rewarm_seconds"] = warm
            d = r["stages_alone"]["decode"]
            r["decode_bytes_per_second"] = d["bytes_per_second"]
            # The decode stage inside the end-to-end run: decoded bytes per CPU-second of its
            # threads (from its own accounting; hardly moved by other processes on the machine).
            (st,) = [x for x in r["stages"] if x["name"] == "decode"]
            r["e2e_decode_bytes_per_cpu_second"] = (st["bytes"] / st["cpu_seconds"]
                                                    if st.get("bytes") and st.get("cpu_seconds") else None)
            if d["samples"] < samples:
                r["note"] = f"decode alone ran on {d['samples']} of {samples} samples (memory budget)"
                print(f"[decode] note: {r['note']}", file=sys.stderr)
            jr["feedline_runs"][str(t)].append(r)
            log_run("decode", i, a.pairs, f"feedline decode T={t}", fmt_value("B/s", d["bytes_per_second"]), r)
    zruns = jr["zstd_runs"]
    add_row(rows, "decode", "zstd -d -T1", "(single thread)", "B/s", None,
            [z["bytes_per_second"] for z in zruns], None)
    for t in threads:
        runs = jr["feedline_runs"][str(t)]
        add_row(rows, "decode", f"decode alone T={t}", f"{t} x zstd -d -T1", "B/s",
                [t * z["bytes_per_second"] for z in zruns], [r["decode_bytes_per_second"] for r in runs],
                TARGETS["decode"], extra={"others_cores": [r["others_cores"] for r in runs],
                                          "zstd_others_cores": [z["others_cores"] for z in zruns]})
        add_row(rows, "decode", f"in e2e T={t}, per CPU-s", "zstd -d per CPU-s", "B/s",
                [z["bytes_per_cpu_second"] for z in zruns], [r["e2e_decode_bytes_per_cpu_second"] for r in runs],
                None)
        add_row(rows, "decode", f"e2e T={t} (info)", "-", "B/s", None,
                [r["bytes_per_second"] for r in runs], None)
        verdicts.append(("decode", f"T={t}", median_run(runs)))


def job_accounting(a, tmp, specs, report, rows, verdicts):
    (n,) = [n for n in specs if n.startswith("acc-")]
    stamp = prepare(a, n, specs[n][0])
    root = os.path.join(a.dir, n)
    epochs = 2 if a.quick else 4
    base = [root, "--format", "tar", "--epochs", str(epochs)]
    jr = report["jobs"]["accounting"] = {
        "description": f"feedline run with stall accounting off (A) and on (B), {epochs} epochs of "
                       "small samples (CPU-bound)", "dataset": n, "gen": stamp, "epochs": epochs,
        "off": [], "on": []}
    for i in range(a.pairs):
        for side, extra in (("off", ["--no-accounting"]), ("on", [])):
            warm = warm_cache([root])
            r = feedline_run(a, tmp, base + extra, f"acc-{side}-{i}")
            r["rewarm_seconds"] = warm
            r["cpu_seconds_per_sample"] = r["cpu_seconds"] / r["samples"]
            if r["accounting"] != (side == "on"):
                raise ToolFailure(f"feedline reported accounting={r['accounting']} for the '{side}' run")
            jr[side].append(r)
            log_run("accounting", i, a.pairs, f"accounting {side}", fmt_value("samples/s", r["samples_per_second"]), r)
    off, on = jr["off"], jr["on"]
    add_row(rows, "accounting", "samples/s on/off", "--no-accounting", "samples/s",
            [r["samples_per_second"] for r in off], [r["samples_per_second"] for r in on],
            TARGETS["accounting"], extra={"others_cores_off": [r["others_cores"] for r in off],
                                          "others_cores_on": [r["others_cores"] for r in on]})
    # CPU per sample is less disturbed by other processes than wall-clock rates: shown for
    # information, as off/on so that, like the graded row, higher is better for us.
    offc, onc = med([r["cpu_seconds_per_sample"] for r in off]), med([r["cpu_seconds_per_sample"] for r in on])
    rows.append({"job": "accounting", "metric": "cpu/sample (off/on)", "peer": "--no-accounting",
                 "unit": "cpu-us", "peer_median": offc, "ours_median": onc,
                 "ratio": offc / onc if offc and onc else None, "target": "-", "status": "info",
                 "peer_runs": [r["cpu_seconds_per_sample"] for r in off],
                 "ours_runs": [r["cpu_seconds_per_sample"] for r in on]})
    verdicts.append(("accounting", "on", median_run(on)))


def job_smallfiles(a, tmp, specs, report, rows, verdicts):
    (n,) = [n for n in specs if n.startswith("small-")]
    stamp = prepare(a, n, specs[n][0])
    root = os.path.join(a.dir, n)
    t = a.threads
    py_cmd = [sys.executable, os.path.abspath(__file__), "--py-reader", root, "--threads", str(t)]
    ours_args = [root, "--format", "files", "--batch-size", "256", "--decode-threads", str(t),
                 "--io-depth", "64"]
    jr = report["jobs"]["smallfiles"] = {
        "description": f"files/s reading {specs[n][1]} files of 4-128 KiB: Python "
                       f"ThreadPoolExecutor(max_workers={t}) open+read per file (A) vs feedline run (B); "
                       f"{'cold' if a.cold else 'warm'} page cache",
        "dataset": n, "gen": stamp, "threads": t, "cache": "cold" if a.cold else "warm",
        "python_cmd": py_cmd, "feedline_cmd": [a.feedline, "run", *ours_args, "--json", "FILE"],
        "timing": "graded: read phase only for both (Python: after os.walk + shuffle; feedline: "
                  "samples_per_second, which excludes its listing); info: whole process",
        "python": [], "feedline": []}
    if not a.cold:
        secs = warm_cache([root])
        print(f"[smallfiles] warmed the page cache ({specs[n][1]} files in {secs:.1f} s)",
              file=sys.stderr, flush=True)
    for i in range(a.pairs):
        for side in ("python", "feedline"):
            prep = None
            if a.cold:
                drop_caches()
            else:
                prep = warm_cache([root])
            if side == "python":
                c = run_child(py_cmd)
                r = parse_json(c["stdout"], "python reader")
                r.update(child_summary(c))
                r["samples"] = r["files"]
            else:
                r = feedline_run(a, tmp, ours_args, f"small-{i}")
                r["files_per_second"] = r["samples_per_second"]
            r["whole_process_files_per_second"] = r["samples"] / r["wall_seconds"]
            r["rewarm_seconds"] = prep
            if r["samples"] != specs[n][1]:
                raise ToolFailure(f"{side} read {r['samples']} files, expected {specs[n][1]}")
            jr[side].append(r)
            log_run("smallfiles", i, a.pairs, side, fmt_value("files/s", r["files_per_second"]), r)
    py, fl = jr["python"], jr["feedline"]
    add_row(rows, "smallfiles", f"files/s T={t}", f"python TPE({t})", "files/s",
            [r["files_per_second"] for r in py], [r["files_per_second"] for r in fl], TARGETS["smallfiles"],
            extra={"others_cores_python": [r["others_cores"] for r in py],
                   "others_cores_feedline": [r["others_cores"] for r in fl]})
    add_row(rows, "smallfiles", "whole process (info)", f"python TPE({t})", "files/s",
            [r["whole_process_files_per_second"] for r in py],
            [r["whole_process_files_per_second"] for r in fl], None)
    verdicts.append(("smallfiles", f"T={t}", median_run(fl)))


def median_run(runs):
    """The run whose end-to-end samples/s is the median (the lower middle one for an even count)."""
    s = sorted(runs, key=lambda r: r["samples_per_second"])
    return s[(len(s) - 1) // 2]


def add_row(rows, job, metric, peer, unit, peer_runs, ours_runs, target, extra=None):
    pv = med(peer_runs) if peer_runs is not None else None
    ov = med(ours_runs)
    ratio = ov / pv if pv and ov is not None else None
    if target is None:
        status, tstr = "info", "-"
    else:
        tstr = f">={target:.2f}"
        status = "PASS" if ratio is not None and ratio >= target else "FAIL"
    r = {"job": job, "metric": metric, "peer": peer, "unit": unit, "peer_median": pv, "ours_median": ov,
         "ratio": ratio, "target": tstr, "status": status, "peer_runs": peer_runs, "ours_runs": ours_runs}
    if extra:
        r.update(extra)
    rows.append(r)


JOBS = {"efficiency": job_efficiency, "decode": job_decode, "accounting": job_accounting,
        "smallfiles": job_smallfiles}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--py-reader":
        return py_reader(sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--jobs", default="efficiency,decode,accounting,smallfiles")
    ap.add_argument("--files", type=int, default=100000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--feedline", required=True)
    ap.add_argument("--zstd", default="zstd")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    jobs = [j for j in a.jobs.split(",") if j]
    for j in jobs:
        if j not in JOBS:
            ap.error(f"unknown job {j}")
    if a.quick:
        a.pairs = max(2, a.pairs - 1)
    specs = dataset_specs(a)

    print(f"pipeline-bench: dir={a.dir} pairs={a.pairs} jobs={','.join(jobs)} threads={a.threads}"
          f"{' quick' if a.quick else ''}{' cold' if a.cold else ''}\n  feedline: {a.feedline}",
          file=sys.stderr, flush=True)
    report = {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release(),
        "python": sys.version.split()[0], "dir": a.dir, "pairs": a.pairs, "quick": a.quick,
        "cold": a.cold, "threads": a.threads, "feedline": {"path": a.feedline},
        "cpu_measure": "user+sys of the child process, getrusage(RUSAGE_CHILDREN) deltas; others_cores: "
                       "busy CPU of the whole machine (/proc/stat) minus the child's, per wall second; "
                       "minor_faults: ru_minflt delta of the child",
        "targets": TARGETS, "jobs": {}, "table": [], "verdicts": []}
    rows, verdicts = [], []
    status = 0
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        try:
            for job in jobs:
                JOBS[job](a, tmp, specs, report, rows, verdicts)
        except ToolFailure as e:
            report["failure"] = str(e)
            print(f"pipeline-bench: tool failure: {e}", file=sys.stderr)
            status = 1
    report["table"] = rows
    report["verdicts"] = [{"job": j, "variant": v, "bottleneck": r.get("bottleneck"),
                           "input_bound": r.get("input_bound"), "samples_per_second": r["samples_per_second"]}
                          for j, v, r in verdicts]
    report["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with open(a.out, "w") as fh:
        json.dump(report, fh, indent=2)
    if status:
        return status

    header = (f"{'job':10s} {'metric':22s} {'peer':26s} {'peer(median)':>14s} {'ours(median)':>14s} "
              f"{'ratio':>6s}  {'target':6s} {'':4s}")
    print()
    print(header)
    print("-" * len(header))
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"{r['job']:10s} {r['metric']:22s} {r['peer']:26s} {fmt_value(r['unit'], r['peer_median']):>14s} "
              f"{fmt_value(r['unit'], r['ours_median']):>14s} {ratio:>6s}  {r['target']:6s} {r['status']}")
    graded = [r for r in rows if r["status"] != "info"]
    passed = sum(r["status"] == "PASS" for r in graded)
    print(f"\n{passed}/{len(graded)} targets met (ratio = ours/peer of the medians; higher is better)")
    notes = []
    if "efficiency" in report["jobs"]:
        notes.append("efficiency: peer = the slowest of storage/decode/collate measured alone by the same\n"
                     "  `feedline run --stages-alone` right after its end-to-end run (warm page cache);\n"
                     "  decode and collate alone use the samples that fit half the memory budget;\n"
                     "  'CPU ceiling' (info): cores / the CPU-seconds per sample of the three stages alone\n"
                     "  added up, the most any overlap of them can reach when each needs CPU (on 2 cores a\n"
                     "  2-thread decode alone already uses both: the slowest-stage target assumes spare cores)")
    if "decode" in report["jobs"]:
        notes.append("decode: ours also computes an XXH3-64 digest of every decoded member (the delivered\n"
                     "  digest) and allocates each sample's output buffer; zstd -d decompresses the same\n"
                     "  frames concatenated in one file to /dev/null; both verify the frames' checksums;\n"
                     "  'per CPU-s' (info): decoded bytes per CPU-second, zstd's whole process against the\n"
                     "  decode stage's own cpu_seconds in the end-to-end run (robust to a busy machine)")
    if "accounting" in report["jobs"]:
        notes.append("accounting: cpu/sample is user+sys of the whole process per delivered sample (info)")
    if "smallfiles" in report["jobs"]:
        sj = report["jobs"]["smallfiles"]
        notes.append(f"smallfiles: {sj['cache']} page cache; graded files/s exclude listing for both (Python:\n"
                     "  os.walk + shuffle before the timed ThreadPoolExecutor phase; feedline: samples_per_second\n"
                     "  starts after its listing); 'whole process' includes start-up and listing;\n"
                     "  ours also hashes (XXH3) and copies every file into batches, Python only reads"
                     + ("" if a.cold else "\n  the cold-cache case is not measured (run with --cold, as root)"))
    for note in notes:
        print(note)
    others = [x for j in report["jobs"].values() for x in _all_others(j)]
    if others:
        worst = max(others)
        print(f"other processes used {min(others):.1f}-{worst:.1f} of {os.cpu_count()} cores during the runs"
              + ("  (a busy machine: the figures are noisy)" if worst > 0.25 * (os.cpu_count() or 1) else ""))
    if verdicts:
        print("\nfeedline's bottleneck verdicts (median run of each):")
        for j, v, r in verdicts:
            b = r.get("bottleneck") or {}
            print(f"  {j} {v}: {b.get('stage')} (input-bound: {r.get('input_bound')})\n"
                  f"    evidence: {b.get('evidence')}\n    next: {b.get('suggestion')}")
    print(f"raw runs and table: {a.out}")
    return 0


def _all_others(obj):
    """Every others_cores figure in a job's runs."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "others_cores" and isinstance(v, (int, float)):
                yield v
            elif isinstance(v, (dict, list)):
                yield from _all_others(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _all_others(v)


if __name__ == "__main__":
    sys.exit(main())
