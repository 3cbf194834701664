#!/usr/bin/python3
"""Driver for bench/compare-torch.sh: feedline run against a PyTorch DataLoader on the same files.

Normally started by compare-torch.sh, which fills in defaults and checks the tools. The driver uses
the standard library only; the peer (`compare_torch.py --peer DIR ...`, a child of the driver) needs
torch and xxhash, and runs under the same interpreter (sys.executable).

Jobs, each on its own dataset under --dir (generated once with `feedline gen --format files`,
reused while the .stamp next to it matches the generation parameters):
  files64k  fixed 64 KiB files (20,000; --quick 4,000)
  files4k   fixed 4 KiB files (100,000; --quick 20,000)

Per pair: the peer with num_workers=0 and with num_workers=W (the order alternates between pairs),
then `feedline run`. Before every run the driver reads every file of the dataset again and checks
with fincore that it is resident. After the pairs, one `feedline run --stages-alone` gives the CPU
ceiling. What each side times:
  peer  the epoch loop: iter(loader) (worker start) to the last batch (worker shutdown); the
        interpreter start, `import torch` and the listing come before it
  ours  samples_per_second of feedline's report: delivered samples / wall_seconds, the consumer's
        clock from the pipeline's start (after the listing) to the last batch
Every child's user+sys CPU is taken from getrusage(RUSAGE_CHILDREN) deltas (it counts the
DataLoader's workers, which the peer waits for), its peak RSS from wait4's ru_maxrss (the largest
single process of its tree) and from the summed RSS of its process tree sampled every 20 ms, and
the CPU other processes used meanwhile from /proc/stat: the "others" figure says how much a run was
disturbed on a shared machine.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

KiB = 1024
MiB = 1024 * 1024
MASK64 = (1 << 64) - 1
PAGE = os.sysconf("SC_PAGE_SIZE")

TARGETS = {"samples/s": 3.00, "ceiling": 0.90}
RESIDENT_WARN = 0.99

# name -> (sample size, files, files with --quick)
JOBS = {"files64k": ("64KiB", 20000, 4000), "files4k": ("4KiB", 100000, 20000)}


class ToolFailure(Exception):
    pass


# --- listing: the same samples as feedline ---------------------------------------------------------

def list_samples(root):
    """Every sample file under root, sorted. Hidden files and folders are left out, as feedline's
    files format does (among them gen's manifest .feedline-dataset, which is not a sample)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out.extend(os.path.join(dirpath, f) for f in filenames if not f.startswith("."))
    out.sort()
    return out


# --- the peer: a PyTorch DataLoader over the files -------------------------------------------------

def peer(argv):
    """One epoch of a DataLoader over DIR; prints a JSON line with the loop's timing and checksum."""
    t_exec = time.monotonic()
    ap = argparse.ArgumentParser(prog="compare_torch.py --peer")
    ap.add_argument("--peer", dest="root", required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    import torch  # here, not at the top: the driver itself needs no torch
    import torch.utils.data
    import xxhash
    t_import = time.monotonic()

    class FilesDataset(torch.utils.data.Dataset):
        """Map-style: sample i is the whole of file i, as a uint8 tensor, with its XXH3-64."""

        def __init__(self, paths):
            self.paths = paths

        def __len__(self):
            return len(self.paths)

        def __getitem__(self, i):
            with open(self.paths[i], "rb", buffering=0) as f:
                size = os.fstat(f.fileno()).st_size
                buf = bytearray(size)  # writable, so torch.frombuffer shares it without a copy
                view = memoryview(buf)
                got = 0
                while got < size:
                    n = f.readinto(view[got:])
                    if not n:
                        raise OSError(f"{self.paths[i]}: short read ({got} of {size} bytes)")
                    got += n
            return torch.frombuffer(buf, dtype=torch.uint8), xxhash.xxh3_64_intdigest(buf)

    def collate(samples):
        """One tensor per batch (the samples are of equal size) and the batch's checksum."""
        return (torch.stack([t for t, _ in samples]),
                sum(h for _, h in samples) & MASK64)

    paths = list_samples(a.root)
    t_list = time.monotonic()
    gen = torch.Generator()
    gen.manual_seed(a.seed)
    loader = torch.utils.data.DataLoader(
        FilesDataset(paths), batch_size=a.batch, shuffle=True, generator=gen,
        num_workers=a.workers, collate_fn=collate, pin_memory=False, persistent_workers=False,
        drop_last=False)

    def cpu_now():  # this process and its waited-for children (the workers, once joined)
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    samples = nbytes = batches = 0
    digest = 0
    cpu0 = cpu_now()
    t0 = time.monotonic()
    for tensor, h in loader:
        samples += tensor.shape[0]
        nbytes += tensor.numel()
        batches += 1
        digest = (digest + h) & MASK64
    t1 = time.monotonic()
    cpu1 = cpu_now()  # the iterator has joined its workers by now (persistent_workers=False)
    loop = t1 - t0
    json.dump({"samples": samples, "bytes": nbytes, "batches": batches, "digest": digest,
               "num_workers": a.workers, "batch_size": a.batch, "torch": torch.__version__,
               "torch_threads": torch.get_num_threads(), "xxhash": xxhash.VERSION,
               "import_seconds": t_import - t_exec, "list_seconds": t_list - t_import,
               "loop_seconds": loop, "samples_per_second": samples / loop if loop > 0 else 0.0,
               "pre_loop_cpu_seconds": cpu0, "loop_cpu_seconds": cpu1 - cpu0},
              sys.stdout)
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


class TreeRss(threading.Thread):
    """Samples the summed RSS of a process and its descendants every `interval` seconds."""

    def __init__(self, pid, interval=0.02):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak = 0
        self.done = threading.Event()

    @staticmethod
    def _children(pid):
        kids = []
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            pass
        return kids

    def _sample(self):
        total, todo, seen = 0, [self.pid], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            try:
                with open(f"/proc/{pid}/statm") as f:
                    total += int(f.read().split()[1]) * PAGE
            except (OSError, ValueError, IndexError):
                continue
            todo.extend(self._children(pid))
        self.peak = max(self.peak, total)

    def run(self):
        while not self.done.is_set():
            self._sample()
            self.done.wait(self.interval)


def run_child(cmd, tmp, tag, timeout=3600):
    """Run cmd (stdout and stderr to files); return a dict with its output, CPU, wall, peak RSS."""
    out_path, err_path = os.path.join(tmp, f"{tag}.out"), os.path.join(tmp, f"{tag}.err")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0 = cpu_busy_seconds()
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    try:
        with open(out_path, "w") as fo, open(err_path, "w") as fe:
            p = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
    except OSError as e:
        raise ToolFailure(f"could not start {cmd[0]}: {e}")
    rss = TreeRss(p.pid)
    rss.start()
    timed_out = threading.Event()

    def kill():
        timed_out.set()
        os.kill(p.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        _, status, ru = os.wait4(p.pid, 0)  # its rusage: ru_maxrss of this child alone
    finally:
        timer.cancel()
        rss.done.set()
        rss.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    busy1 = cpu_busy_seconds()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out_path) as f:
        stdout = f.read()
    with open(err_path) as f:
        stderr = f.read()
    if p.returncode != 0:
        why = f"timed out after {timeout} s" if timed_out.is_set() else f"exit status {p.returncode}"
        raise ToolFailure(f"{why}: {' '.join(cmd)}\nstderr: {stderr.strip()[-2000:]}\n"
                          f"stdout: {stdout.strip()[-1000:]}")
    user = after.ru_utime - before.ru_utime
    system = after.ru_stime - before.ru_stime
    others = None
    if busy0 is not None and busy1 is not None and wall > 0:
        # CPU the rest of the machine used meanwhile, in cores (the driver itself only waits).
        others = max(0.0, (busy1 - busy0) - (user + system)) / wall
    return {"stdout": stdout, "stderr": stderr, "cpu_user_seconds": user, "cpu_sys_seconds": system,
            "cpu_seconds": user + system, "wall_seconds": wall,
            "minor_faults": after.ru_minflt - before.ru_minflt,
            "max_rss_bytes": ru.ru_maxrss * KiB, "tree_rss_peak_bytes": rss.peak or None,
            "others_cores": others, "loadavg1_before": load0}


SUMMARY_KEYS = ("cpu_user_seconds", "cpu_sys_seconds", "cpu_seconds", "wall_seconds", "minor_faults",
                "max_rss_bytes", "tree_rss_peak_bytes", "others_cores", "loadavg1_before")


def child_summary(c):
    return {k: c[k] for k in SUMMARY_KEYS}


def parse_json(text, tool):
    start = text.find("{")
    if start < 0:
        raise ToolFailure(f"{tool} printed no JSON: {text.strip()[-1000:]}")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as e:
        raise ToolFailure(f"{tool} printed unparsable JSON ({e}): {text.strip()[-1000:]}")
    return obj


# --- datasets and the page cache -------------------------------------------------------------------

def prepare(a, tmp, name, gen_args):
    """Generate DIR/name once; return its stamp (the gen arguments and gen's JSON summary)."""
    root = os.path.join(a.dir, name)
    stamp_path = os.path.join(a.dir, name + ".stamp")
    try:
        with open(stamp_path) as f:
            stamp = json.load(f)
        if stamp.get("gen_args") == gen_args and os.path.isdir(root):
            print(f"[data] reusing {root}", file=sys.stderr, flush=True)
            return stamp
    except (OSError, ValueError):
        pass
    # Parameters changed or the dataset is incomplete: start over (only our own named folder).
    if os.path.exists(stamp_path):
        os.remove(stamp_path)
    shutil.rmtree(root, ignore_errors=True)
    print(f"[data] generating {root}: feedline gen {' '.join(gen_args)}", file=sys.stderr, flush=True)
    c = run_child([a.feedline, "gen", root, *gen_args, "--output", "json"], tmp, f"gen-{name}")
    stamp = {"gen_args": gen_args, "feedline_gen": parse_json(c["stdout"], "feedline gen"),
             "gen_seconds": c["wall_seconds"]}
    with open(stamp_path, "w") as f:
        json.dump(stamp, f, indent=2)
    return stamp


def warm_cache(paths):
    """Read every file once, so that the next run starts from a warm page cache; returns seconds."""
    t0 = time.monotonic()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(view):
                pass
    return time.monotonic() - t0


def resident_fraction(paths, chunk=2000):
    """Fraction of the files' pages in the page cache, from fincore (util-linux); and its seconds."""
    t0 = time.monotonic()
    resident = pages = 0
    for i in range(0, len(paths), chunk):
        part = paths[i:i + chunk]
        p = subprocess.run(["fincore", "--raw", "--noheadings", "--bytes", "--output", "PAGES,SIZE,FILE",
                            *part], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise ToolFailure(f"fincore failed (exit status {p.returncode}): {p.stderr.strip()[-1000:]}")
        lines = p.stdout.splitlines()
        if len(lines) != len(part):
            raise ToolFailure(f"fincore listed {len(lines)} of {len(part)} files: {p.stderr.strip()[-500:]}")
        for line in lines:
            res, size, _ = line.split(maxsplit=2)
            resident += int(res)
            pages += -(-int(size) // PAGE)
    return (resident / pages if pages else 1.0), time.monotonic() - t0


def rewarm(job, paths, rec):
    """warm_cache + fincore, recorded in rec; warns when the files are not all resident."""
    rec["rewarm_seconds"] = warm_cache(paths)
    frac, secs = resident_fraction(paths)
    rec["resident_fraction"] = frac
    rec["fincore_seconds"] = secs
    if frac < RESIDENT_WARN:
        print(f"[{job}] warning: only {frac:.1%} of the files' pages were resident before this run "
              f"(fincore; target {RESIDENT_WARN:.0%}): it partly read from storage",
              file=sys.stderr, flush=True)


# --- the two sides -------------------------------------------------------------------------------

def peer_run(a, tmp, root, workers, tag):
    cmd = [sys.executable, os.path.abspath(__file__), "--peer", root, "--workers", str(workers),
           "--batch", str(a.batch)]
    c = run_child(cmd, tmp, tag)
    r = parse_json(c["stdout"], "the DataLoader peer")
    r.update(child_summary(c))
    r["cmd"] = cmd
    return r


def feedline_run(a, tmp, root, tag, extra=()):
    """`feedline run ROOT --format files ... --json FILE`; returns a record of the report."""
    path = os.path.join(tmp, f"{tag}.json")
    cmd = [a.feedline, "run", root, "--format", "files", "--batch-size", str(a.batch), "--epochs", "1",
           *extra, "--json", path]
    c = run_child(cmd, tmp, tag)
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise ToolFailure(f"feedline wrote no readable JSON report ({e}): {' '.join(cmd)}")
    if doc.get("error") or doc.get("interrupted"):
        raise ToolFailure(f"feedline run reported error={doc.get('error')!r} "
                          f"interrupted={doc.get('interrupted')}: {' '.join(cmd)}")
    try:
        delivered = doc["delivered"]
        rec = {
            "samples": int(doc["samples"]),
            "bytes": int(doc["bytes"]),
            "batches": int(doc["batches"]),
            "samples_per_second": float(doc["samples_per_second"]),
            "loop_seconds": float(doc["wall_seconds"]),
            "digest": delivered["digest"],
            "digest_verified": delivered.get("verified"),
            "input_bound": doc.get("input_bound"),
            "bottleneck": doc.get("bottleneck"),
            "stages": [{k: s.get(k) for k in ("name", "threads", "busy_fraction", "starved_fraction",
                                                "blocked_fraction", "cpu_seconds", "items")}
                       for s in doc.get("stages", [])],
            "config": doc.get("config"),
            "engine": (doc.get("io") or {}).get("engine"),
            "memory_peak_bytes": (doc.get("memory") or {}).get("peak_bytes"),
        }
    except (KeyError, TypeError, ValueError) as e:
        raise ToolFailure(f"feedline's JSON report lacks an expected field ({e!r}): {' '.join(cmd)}")
    if "stages_alone" in doc:
        rec["stages_alone"] = doc["stages_alone"]
    rec.update(child_summary(c))
    rec["cmd"] = cmd
    return rec


# --- formatting ------------------------------------------------------------------------------------

def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def fmt_value(unit, v):
    if v is None:
        return "-"
    if unit == "bytes":
        return f"{v / MiB:.0f} MiB"
    if unit == "cpu-s/1k":
        return f"{v * 1e3:.1f} ms"
    if v >= 1e6:
        return f"{v / 1e6:.2f}M smp/s"
    if v >= 1e4:
        return f"{v / 1e3:.1f}k smp/s"
    return f"{v:.0f} smp/s"


def log_run(job, i, pairs, side, r):
    o = r.get("others_cores")
    print(f"[{job}] pair {i + 1}/{pairs} {side:18s} {fmt_value('samples/s', r['samples_per_second']):>12s}"
          f"  cpu {r['cpu_seconds']:6.2f} s  wall {r['wall_seconds']:6.2f} s"
          f"  rss {r['max_rss_bytes'] / MiB:5.0f} MiB  resident {r['resident_fraction']:.3f}"
          f"  others {'?' if o is None else f'{o:.1f}'} cores", file=sys.stderr, flush=True)


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


def median_run(runs):
    """The run whose samples/s is the median (the lower middle one for an even count)."""
    s = sorted(runs, key=lambda r: r["samples_per_second"])
    return s[(len(s) - 1) // 2]


# --- a job ---------------------------------------------------------------------------------------

def run_job(a, tmp, job, report, rows, verdicts):
    size, n_full, n_quick = JOBS[job]
    n = getattr(a, job) or (n_quick if a.quick else n_full)
    name = f"{job}-{n}"
    gen_args = ["--format", "files", "--samples", str(n), "--sample-size", size]
    stamp = prepare(a, tmp, name, gen_args)
    root = os.path.join(a.dir, name)
    paths = list_samples(root)
    if len(paths) != n:
        raise ToolFailure(f"{root} holds {len(paths)} sample files, expected {n}: delete it and its "
                          f".stamp to generate it again")
    gen_digest = stamp["feedline_gen"].get("digest")
    settings = [0, a.workers]
    jr = report["jobs"][job] = {
        "dataset": name, "root": root, "files": n, "sample_size": size, "gen": stamp,
        "peer_settings": {str(w): f"DataLoader num_workers={w}" for w in settings},
        "peer": {str(w): [] for w in settings}, "peer_best": [], "feedline": [], "stages_alone": None}
    for i in range(a.pairs):
        order = settings if i % 2 == 0 else settings[::-1]
        pair = {}
        for w in order:
            rec = {}
            rewarm(job, paths, rec)
            r = peer_run(a, tmp, root, w, f"{job}-peer{w}-{i}")
            r.update(rec)
            if r["samples"] != n:
                raise ToolFailure(f"the peer (num_workers={w}) delivered {r['samples']} samples, expected {n}")
            pair[w] = r
            report["python"].setdefault("torch", r.get("torch"))
            report["python"].setdefault("xxhash", r.get("xxhash"))
            jr["peer"][str(w)].append(r)
            log_run(job, i, a.pairs, f"peer nw={w}", r)
        best = max(settings, key=lambda w: pair[w]["samples_per_second"])
        jr["peer_best"].append(dict(pair[best], setting=best))
        rec = {}
        rewarm(job, paths, rec)
        r = feedline_run(a, tmp, root, f"{job}-ours-{i}")
        r.update(rec)
        if r["samples"] != n:
            raise ToolFailure(f"feedline delivered {r['samples']} samples, expected {n}")
        if r["digest"] is None:
            raise ToolFailure("feedline's report has no delivered digest (samples not through host memory?)")
        jr["feedline"].append(r)
        log_run(job, i, a.pairs, "feedline", r)
        # Same bytes: the peer's checksum is feedline's delivered digest (and gen's).
        for w in settings:
            if pair[w]["digest"] != r["digest"]:
                raise ToolFailure(f"checksums differ: the peer (num_workers={w}) summed {pair[w]['digest']}, "
                                  f"feedline delivered {r['digest']} (gen recorded {gen_digest})")
        if gen_digest is not None and r["digest"] != gen_digest:
            raise ToolFailure(f"feedline delivered digest {r['digest']}, gen recorded {gen_digest}")

    # The CPU ceiling, once per job: each stage alone on the whole dataset (decode and collate on
    # what fits half of feedline's memory budget), right after its own end-to-end run.
    rec = {}
    rewarm(job, paths, rec)
    sa_run = feedline_run(a, tmp, root, f"{job}-alone",
                          ["--stages-alone", "--stages-alone-samples", str(n)])
    sa_run.update(rec)
    sa = sa_run.get("stages_alone")
    if not sa:
        raise ToolFailure("feedline run --stages-alone wrote no stages_alone section in its report")
    jr["stages_alone"] = sa_run
    ceiling = sa.get("cpu_ceiling_samples_per_second")
    print(f"[{job}] stages alone: " + ", ".join(f"{s['stage']} {s['samples_per_second']:.0f} smp/s"
                                                for s in sa.get("stages", []))
          + (f"; CPU ceiling {ceiling:.0f} smp/s ({sa.get('cpu_per_sample_us', 0):.1f} CPU-us per sample, "
             f"{sa.get('cores')} cores)" if ceiling else "; no CPU ceiling in the report"),
          file=sys.stderr, flush=True)

    peer_best, ours = jr["peer_best"], jr["feedline"]
    wins = {w: sum(r["setting"] == w for r in peer_best) for w in settings}
    best_label = "DataLoader best (" + ", ".join(f"nw={w} x{k}" for w, k in wins.items() if k) + ")"
    others = {"others_cores_peer": [r["others_cores"] for r in peer_best],
              "others_cores_ours": [r["others_cores"] for r in ours],
              "resident_fraction_peer": [r["resident_fraction"] for r in peer_best],
              "resident_fraction_ours": [r["resident_fraction"] for r in ours]}
    add_row(rows, job, "samples/s", best_label, "samples/s", [r["samples_per_second"] for r in peer_best],
            [r["samples_per_second"] for r in ours], TARGETS["samples/s"], extra=others)
    for w in settings:
        add_row(rows, job, "samples/s (info)", f"DataLoader nw={w}", "samples/s",
                [r["samples_per_second"] for r in jr["peer"][str(w)]],
                [r["samples_per_second"] for r in ours], None)
    add_row(rows, job, "whole process (info)", best_label.replace("best", "best's"), "samples/s",
            [r["samples"] / r["wall_seconds"] for r in peer_best],
            [r["samples"] / r["wall_seconds"] for r in ours], None)
    add_row(rows, job, "CPU/1k samples (info)", best_label.replace("best", "best's"), "cpu-s/1k",
            [1e3 * r["cpu_seconds"] / r["samples"] for r in peer_best],
            [1e3 * r["cpu_seconds"] / r["samples"] for r in ours], None)
    # The same without the peer's fixed start-up (interpreter, import torch: ~2 CPU-s) and listing,
    # measured inside it around the loop; ours stays the whole process (start-up, listing included).
    add_row(rows, job, "CPU/1k, peer loop (info)", best_label.replace("best", "best's") + " loop",
            "cpu-s/1k", [1e3 * r["loop_cpu_seconds"] / r["samples"] for r in peer_best],
            [1e3 * r["cpu_seconds"] / r["samples"] for r in ours], None)
    add_row(rows, job, "peak RSS (info)", "largest process", "bytes",
            [r["max_rss_bytes"] for r in peer_best], [r["max_rss_bytes"] for r in ours], None)
    add_row(rows, job, "peak RSS, tree (info)", "all processes, summed", "bytes",
            [r["tree_rss_peak_bytes"] for r in peer_best], [r["tree_rss_peak_bytes"] for r in ours], None)
    add_row(rows, job, "vs CPU ceiling", "--stages-alone ceiling", "samples/s",
            [ceiling] if ceiling else None, [r["samples_per_second"] for r in ours], TARGETS["ceiling"],
            extra={"cpu_per_sample_us": sa.get("cpu_per_sample_us"), "cores": sa.get("cores"),
                   "stages_alone": sa.get("stages"),
                   "stages_alone_run_efficiency_vs_cpu_ceiling": sa.get("efficiency_vs_cpu_ceiling")})
    verdicts.append((job, median_run(ours)))


# --- main ----------------------------------------------------------------------------------------

def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--peer":
        return peer(sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--files64k", type=int)
    ap.add_argument("--files4k", type=int)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--feedline", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    jobs = [j for j in a.jobs.split(",") if j]
    for j in jobs:
        if j not in JOBS:
            ap.error(f"unknown job {j}")
    if a.workers < 1:
        ap.error("--workers must be at least 1")
    if a.quick:
        a.pairs = max(2, a.pairs - 1)
    print(f"compare-torch: dir={a.dir} pairs={a.pairs} jobs={','.join(jobs)} batch={a.batch} "
          f"workers=0,{a.workers}{' quick' if a.quick else ''}\n  feedline: {a.feedline}\n"
          f"  python: {sys.executable} {sys.version.split()[0]}",
          file=sys.stderr, flush=True)
    report = {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release(),
        "python": {"path": sys.executable, "version": sys.version.split()[0]},
        "dir": a.dir, "pairs": a.pairs, "quick": a.quick, "batch": a.batch, "workers": a.workers,
        "feedline": {"path": a.feedline},
        "timing": {"peer": "the epoch loop: iter(DataLoader) (worker start) to the last batch (worker "
                           "shutdown); not interpreter start, import torch or the listing",
                   "ours": "feedline's samples_per_second: delivered samples / wall_seconds, the consumer's "
                           "clock from the pipeline's start (after the listing) to the last batch",
                   "whole_process": "samples / wall time from exec to exit, both sides"},
        "cpu_measure": "user+sys of the child and its waited-for descendants, getrusage(RUSAGE_CHILDREN) "
                       "deltas; max_rss_bytes: wait4's ru_maxrss (the largest single process); "
                       "tree_rss_peak_bytes: summed RSS of the process tree, sampled every 20 ms; "
                       "others_cores: busy CPU of the whole machine (/proc/stat) minus the child's, "
                       "per wall second",
        "cache": "warm: every file read again and its residency checked (fincore) before each run",
        "targets": TARGETS, "jobs": {}, "table": [], "verdicts": []}
    try:
        report["feedline"]["version"] = subprocess.run(
            [a.feedline, "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    except OSError:
        pass
    rows, verdicts = [], []
    status = 0
    with tempfile.TemporaryDirectory(prefix="compare-torch-") as tmp:
        try:
            for job in jobs:
                run_job(a, tmp, job, report, rows, verdicts)
        except ToolFailure as e:
            report["failure"] = str(e)
            print(f"compare-torch: tool failure: {e}", file=sys.stderr)
            status = 1
    report["table"] = rows
    report["verdicts"] = [{"job": j, "bottleneck": r.get("bottleneck"), "input_bound": r.get("input_bound"),
                           "samples_per_second": r["samples_per_second"]} for j, r in verdicts]
    report["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with open(a.out, "w") as fh:
        json.dump(report, fh, indent=2)
    if status:
        return status
    print_table(a, report, rows, verdicts)
    return 0


def print_table(a, report, rows, verdicts):
    header = (f"{'job':9s} {'metric':24s} {'peer':34s} {'peer(median)':>13s} {'ours(median)':>13s} "
              f"{'ratio':>6s}  {'target':6s}")
    print()
    print(header)
    print("-" * (len(header) + 5))
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"{r['job']:9s} {r['metric']:24s} {r['peer']:34s} {fmt_value(r['unit'], r['peer_median']):>13s} "
              f"{fmt_value(r['unit'], r['ours_median']):>13s} {ratio:>6s}  {r['target']:6s} {r['status']}")
    graded = [r for r in rows if r["status"] != "info"]
    passed = sum(r["status"] == "PASS" for r in graded)
    print(f"\n{passed}/{len(graded)} targets met (ratio = ours/peer of the medians; higher is better, "
          "except CPU/1k samples and peak RSS: lower is better)")
    print(f"peer: torch.utils.data.DataLoader over a map-style files Dataset (open + read + XXH3-64 per\n"
          f"  sample, torch.frombuffer, torch.stack per batch of {a.batch}), num_workers 0 and {a.workers};"
          f" 'best' is the\n  faster setting in each pair; its checksum equalled feedline's delivered digest "
          f"in every run\n"
          f"timed: peer = the epoch loop (worker start and shutdown included); ours = feedline's\n"
          f"  samples_per_second (pipeline start, after the listing, to the last batch); 'whole process'\n"
          f"  = exec to exit for both\n"
          f"CPU: user+sys of the whole process tree, exec to exit; 'peer loop' leaves out the peer's\n"
          f"  start-up (interpreter, import torch) and listing, ours stays whole; peak RSS 'tree' sums\n"
          f"  every process's RSS (the peer's forked workers count their shared pages again)\n"
          f"vs CPU ceiling: ours against one `feedline run --stages-alone` per job: cores / (CPU-seconds\n"
          f"  per sample of storage, decode and collate alone, added up)")
    fracs = [x for j in report["jobs"].values()
             for side in (j["feedline"], [r for rs in j["peer"].values() for r in rs])
             for x in (r["resident_fraction"] for r in side)]
    if fracs:
        low = min(fracs)
        print(f"page cache: {low:.1%}-{max(fracs):.1%} of the files' pages resident before the runs (fincore)"
              + (f"  WARNING: below {RESIDENT_WARN:.0%}: some runs read from storage" if low < RESIDENT_WARN else ""))
    others = [r["others_cores"] for j in report["jobs"].values()
              for side in (j["feedline"], [r for rs in j["peer"].values() for r in rs])
              for r in side if r.get("others_cores") is not None]
    if others:
        worst = max(others)
        print(f"other processes used {min(others):.1f}-{worst:.1f} of {os.cpu_count()} cores during the runs"
              + ("  (a busy machine: the figures are noisy)" if worst > 0.25 * (os.cpu_count() or 1) else ""))
    if verdicts:
        print("\nfeedline's bottleneck verdicts (median run of each job):")
        for j, r in verdicts:
            b = r.get("bottleneck") or {}
            print(f"  {j}: {b.get('stage')} (input-bound: {r.get('input_bound')})\n"
                  f"    evidence: {b.get('evidence')}\n    next: {b.get('suggestion')}")
    print(f"raw runs and table: {a.out}")


if __name__ == "__main__":
    sys.exit(main())
