#!/usr/bin/python3
"""Driver for bench/compare-torch.sh: feedline against a PyTorch DataLoader on the same bytes.

Normally started by compare-torch.sh, which fills in defaults and checks the tools (its header
documents every side, metric and job). The driver uses the standard library only; its children
run under the same interpreter (sys.executable):
  compare_torch.py --peer DIR ...         the DataLoader peer (torch, xxhash; zstandard for tar)
  compare_torch.py --python-loop DIR ...  ours from Python: feedline.Loader (PYTHONPATH set by the
                                          driver to --pythonpath), torch for to_torch()

Jobs, each on its own dataset under --dir (generated once with `feedline gen`, reused while the
.stamp next to it matches the generation parameters):
  files64k   fixed 64 KiB files (20,000; --quick 4,000)
  files4k    fixed 4 KiB files (100,000; --quick 20,000)
  shards64k  the files64k samples as zstd tar shards of --samples-per-shard (20,000; --quick 4,000)

Per pair: the peer in its four settings (num_workers 0 and W, each with one shared tensor per batch
and with per-sample tensors; the order alternates between pairs), then `feedline run`, the Python
loop with to_torch() and the Python loop over member views (their order alternates too). Before
every run the driver reads every file of the dataset again and checks with fincore that it is
resident. After the pairs, one `feedline run --stages-alone` gives the CPU ceiling. What each side
times:
  peer  the epoch loop: iter(loader) (worker start) to the last batch (worker shutdown); the
        interpreter start, `import torch` and the listing come before it
  ours  samples_per_second of feedline's report: delivered samples / wall_seconds, the consumer's
        clock from the pipeline's start (after the listing) to the last batch
  py    feedline.Loader(...) (the listing included) to the last batch, after the imports; and its
        report's samples_per_second (ours's clock) for the rows against feedline run
Every child's user+sys CPU is taken from getrusage(RUSAGE_CHILDREN) deltas (it counts the
DataLoader's workers, which the peer waits for), and each child reports its timed loop's CPU from
getrusage(SELF+CHILDREN) deltas inside it; its peak RSS from wait4's ru_maxrss (the largest single
process of its tree) and from the summed RSS of its process tree sampled every 20 ms, and the CPU
other processes used meanwhile from /proc/stat: the "others" figure says how much a run was
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

# Ratios ours/peer of the medians; "py CPU/1k" and "py peak RSS" are at most, the rest at least.
TARGETS = {"samples/s": 3.00, "ceiling": 0.90, "py samples/s": 3.00, "py CPU/1k": 0.50,
           "py peak RSS": 0.50, "py vs run": 0.95}
RESIDENT_WARN = 0.99

# name -> (format, sample size, samples, samples with --quick)
JOBS = {"files64k": ("files", "64KiB", 20000, 4000), "files4k": ("files", "4KiB", 100000, 20000),
        "shards64k": ("tar", "64KiB", 20000, 4000)}


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


# --- the peers: what a PyTorch user writes, over the files and over the shards ---------------------

def vm_rss():
    """This process's resident set now (VmRSS), in bytes; None where /proc says nothing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * KiB
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_now():
    """CPU seconds of this process (all its threads) and of its waited-for children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def peer(argv):
    """One epoch of a DataLoader over DIR; prints a JSON line with the loop's timing and checksum."""
    t_exec = time.monotonic()
    ap = argparse.ArgumentParser(prog="compare_torch.py --peer")
    ap.add_argument("--peer", dest="root", required=True)
    ap.add_argument("--format", choices=("files", "tar"), default="files")
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--tensors", choices=("batch", "sample"), default="batch")
    ap.add_argument("--shuffle-buffer", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    import torch  # here, not at the top: the driver itself needs no torch
    import torch.utils.data
    import xxhash
    zstandard = None
    if a.format == "tar":
        import random
        import tarfile
        import warnings
        import zstandard
        # torch.frombuffer over the immutable bytes zstandard and tarfile return: shared, not copied
        # (nothing writes to them); torch warns about that on every call otherwise.
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
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
            return torch.frombuffer(buf, dtype=torch.uint8), None, xxhash.xxh3_64_intdigest(buf)

    class ShardsDataset(torch.utils.data.IterableDataset):
        """WebDataset-style: the shards in a seeded order, split over the DataLoader's workers
        (get_worker_info), each streamed with tarfile (mode 'r|'); members grouped into samples by
        their key (the name up to its first dot after the last slash, as webdataset does), `.zst`
        members decompressed with zstandard; a shuffle buffer per worker as webdataset's
        shuffle(bufsize) (fill to bufsize, then yield a random one per sample read). A sample is
        (the .bin member as a uint8 tensor, the .cls label as an int, the sum of XXH3-64 of every
        member's decoded bytes)."""

        def __init__(self, shards, seed, bufsize):
            self.shards, self.seed, self.bufsize = shards, seed, bufsize

        def _members(self, shards):
            dctx = zstandard.ZstdDecompressor()
            for path in shards:
                with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r|") as tf:
                    for m in tf:
                        if not m.isfile():
                            continue
                        data = tf.extractfile(m).read()
                        name = m.name
                        if name.endswith(".zst"):
                            data = dctx.decompress(data)  # gen's frames carry their content size
                            name = name[:-4]
                        yield name, data

        def _samples(self, shards):
            key, parts = None, {}
            for name, data in self._members(shards):
                slash = name.rfind("/") + 1
                dot = name.find(".", slash)
                k, ext = (name, "") if dot < 0 else (name[:dot], name[dot + 1:])
                if k != key and parts:
                    yield self._decode(key, parts)
                    parts = {}
                key = k
                parts[ext] = data
            if parts:
                yield self._decode(key, parts)

        @staticmethod
        def _decode(key, parts):
            h = 0
            for data in parts.values():
                h += xxhash.xxh3_64_intdigest(data)
            try:
                x = parts["bin"]
            except KeyError:
                raise ValueError(f"sample {key} has no .bin member (its members: {sorted(parts)})") from None
            label = int(parts["cls"]) if "cls" in parts else None
            return torch.frombuffer(x, dtype=torch.uint8), label, h & MASK64

        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
            order = list(self.shards)
            random.Random(self.seed).shuffle(order)  # the same order in every worker, then split
            rng = random.Random(f"{self.seed}/{wid}")
            buf = []
            for s in self._samples(order[wid::nw]):
                buf.append(s)
                if len(buf) >= self.bufsize:
                    k = rng.randrange(len(buf))
                    buf[k], buf[-1] = buf[-1], buf[k]
                    yield buf.pop()
            rng.shuffle(buf)
            yield from buf

    default_collate = torch.utils.data.default_collate

    def collate_batch(samples):
        """One shared tensor per batch: default_collate stacks the (equal-sized) samples, inside a
        worker straight into a shared-memory tensor; the labels as one int64 tensor."""
        labels = [y for _, y, _ in samples]
        return (default_collate([t for t, _, _ in samples]),
                default_collate(labels) if labels[0] is not None else None,
                sum(h for _, _, h in samples) & MASK64)

    def collate_sample(samples):
        """Per-sample tensors: the batch is a list of the samples' tensors (a worker hands each one
        over in its own shared-memory segment) and a list of labels."""
        return ([t for t, _, _ in samples], [y for _, y, _ in samples],
                sum(h for _, _, h in samples) & MASK64)

    cpu_listing = cpu_now()
    if a.format == "files":
        paths = list_samples(a.root)
        gen = torch.Generator()
        gen.manual_seed(a.seed)
        ds, extra = FilesDataset(paths), {"shuffle": True, "generator": gen}
    else:
        paths = [p for p in list_samples(a.root) if p.endswith(".tar")]
        ds, extra = ShardsDataset(paths, a.seed, a.shuffle_buffer), {}
    t_list = time.monotonic()
    loader = torch.utils.data.DataLoader(
        ds, batch_size=a.batch, num_workers=a.workers,
        collate_fn=collate_batch if a.tensors == "batch" else collate_sample,
        pin_memory=False, persistent_workers=False, drop_last=False, **extra)

    samples = nbytes = batches = 0
    digest = 0
    rss0 = vm_rss()
    cpu0 = cpu_now()
    t0 = time.monotonic()
    for x, _, h in loader:
        if a.tensors == "batch":
            samples += x.shape[0]
            nbytes += x.numel()
        else:
            samples += len(x)
            nbytes += sum(t.numel() for t in x)
        batches += 1
        digest = (digest + h) & MASK64
    t1 = time.monotonic()
    cpu1 = cpu_now()  # the iterator has joined its workers by now (persistent_workers=False)
    loop = t1 - t0
    json.dump({"samples": samples, "bytes": nbytes, "batches": batches, "digest": digest,
               "format": a.format, "num_workers": a.workers, "tensors": a.tensors,
               "batch_size": a.batch, "shuffle_buffer": a.shuffle_buffer if a.format == "tar" else None,
               "objects": len(paths), "torch": torch.__version__,
               "torch_threads": torch.get_num_threads(), "xxhash": xxhash.VERSION,
               "zstandard": zstandard.__version__ if zstandard else None,
               "import_seconds": t_import - t_exec, "list_seconds": t_list - t_import,
               "loop_seconds": loop, "samples_per_second": samples / loop if loop > 0 else 0.0,
               "pre_loop_cpu_seconds": cpu0, "loop_cpu_seconds": cpu1 - cpu0,
               # From the dataset's path to the last batch, as the py side's clock runs (its
               # Loader() lists the dataset): the listing, Dataset and DataLoader included.
               "listed_loop_seconds": t1 - t_import,
               "listed_samples_per_second": samples / (t1 - t_import) if t1 > t_import else 0.0,
               "listed_loop_cpu_seconds": cpu1 - cpu_listing,
               "rss_before_loop_bytes": rss0},
              sys.stdout)
    print()
    return 0


# --- ours from Python: a training loop over feedline.Loader ---------------------------------------

def python_loop(argv):
    """One epoch of feedline.Loader, iterated as a training loop does; prints a JSON line."""
    t_exec = time.monotonic()
    ap = argparse.ArgumentParser(prog="compare_torch.py --python-loop")
    ap.add_argument("--python-loop", dest="root", required=True)
    ap.add_argument("--format", choices=("files", "tar"), default="files")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--touch", choices=("torch", "views"), required=True)
    ap.add_argument("--member", default="", help="suffix of the member to take ('' for the only one)")
    ap.add_argument("--label", default=None, help="suffix of a label member (text) to parse")
    ap.add_argument("--transform", choices=("none", "trivial"), default="none",
                    help="trivial: transform= a Python function that returns the sample's key")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)

    import torch  # a training script has it imported, whichever way it touches the batches
    import feedline
    t_import = time.monotonic()

    samples = nbytes = batches = 0
    digest = 0
    rss0 = vm_rss()
    cpu0 = cpu_now()
    t0 = time.monotonic()
    extra = {"transform": lambda sample: sample["__key__"]} if a.transform == "trivial" else {}
    loader = feedline.Loader(a.root, format=a.format, batch_size=a.batch, epochs=1, shuffle=True,
                             seed=a.seed, **extra)
    t_created = time.monotonic()
    for batch in loader:
        samples += len(batch)
        batches += 1
        digest = (digest + batch.digest) & MASK64
        if a.touch == "torch":
            x, lengths = batch.to_torch(a.member)  # one [len, longest] uint8 tensor: one copy
            nbytes += int(lengths.sum())
            if a.label is not None:
                y = torch.tensor([int(bytes(v)) for v in batch.member(a.label)])
                assert y.shape[0] == x.shape[0]
        else:
            for v in batch.member(a.member):  # zero-copy numpy views, one per sample
                nbytes += v.shape[0]
    t1 = time.monotonic()
    cpu1 = cpu_now()
    report = loader.report()
    loop = t1 - t0
    delivered = report.get("delivered") or {}
    json.dump({"samples": samples, "bytes": nbytes, "batches": batches, "digest": digest,
               "format": a.format, "touch": a.touch, "batch_size": a.batch,
               "feedline_module": os.path.dirname(feedline.__file__), "torch": torch.__version__,
               "import_seconds": t_import - t_exec, "create_seconds": t_created - t0,
               "loop_seconds": loop, "samples_per_second": samples / loop if loop > 0 else 0.0,
               "pre_loop_cpu_seconds": cpu0, "loop_cpu_seconds": cpu1 - cpu0,
               "rss_before_loop_bytes": rss0,
               "report_samples_per_second": report.get("samples_per_second"),
               "report_wall_seconds": report.get("wall_seconds"),
               "report_samples": report.get("samples"), "report_digest": delivered.get("digest"),
               "error": report.get("error"), "interrupted": report.get("interrupted"),
               "input_bound": report.get("input_bound"), "bottleneck": report.get("bottleneck"),
               "au": report.get("au"), "consumer_wait": report.get("consumer_wait"),
               "stages": [{k: st.get(k) for k in ("name", "threads", "busy_fraction", "starved_fraction",
                                                  "blocked_fraction", "cpu_seconds", "items")}
                          for st in report.get("stages", [])],
               "config": report.get("config"), "transform": report.get("transform")},
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


def run_child(cmd, tmp, tag, timeout=3600, env=None):
    """Run cmd (stdout and stderr to files; env: its environment, None for ours); return a dict
    with its output, CPU, wall, peak RSS."""
    out_path, err_path = os.path.join(tmp, f"{tag}.out"), os.path.join(tmp, f"{tag}.err")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0 = cpu_busy_seconds()
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    try:
        with open(out_path, "w") as fo, open(err_path, "w") as fe:
            p = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env)
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


# --- the three sides ----------------------------------------------------------------------------

def peer_run(a, tmp, root, fmt, setting, tag):
    workers, tensors = setting
    cmd = [sys.executable, os.path.abspath(__file__), "--peer", root, "--format", fmt,
           "--workers", str(workers), "--tensors", tensors, "--batch", str(a.batch)]
    if fmt == "tar":
        cmd += ["--shuffle-buffer", str(a.shuffle_buffer)]
    c = run_child(cmd, tmp, tag)
    r = parse_json(c["stdout"], "the DataLoader peer")
    r.update(child_summary(c))
    r["cmd"] = cmd
    return r


def python_run(a, tmp, root, fmt, touch, tag, transform="none"):
    """`compare_torch.py --python-loop` under sys.executable with PYTHONPATH=--pythonpath first."""
    cmd = [sys.executable, os.path.abspath(__file__), "--python-loop", root, "--format", fmt,
           "--batch", str(a.batch), "--touch", touch, "--transform", transform]
    if fmt == "tar":  # gen's zstd shards: members <key>.bin.zst (decoded by feedline) and <key>.cls
        cmd += ["--member", ".bin.zst", "--label", ".cls"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (a.pythonpath, env.get("PYTHONPATH")) if p)
    c = run_child(cmd, tmp, tag, env=env)
    r = parse_json(c["stdout"], "the feedline.Loader loop")
    if r.get("error") or r.get("interrupted"):
        raise ToolFailure(f"feedline.Loader reported error={r.get('error')!r} "
                          f"interrupted={r.get('interrupted')}: {' '.join(cmd)}")
    if r["report_digest"] != r["digest"] or r["report_samples"] != r["samples"]:
        raise ToolFailure(f"feedline.Loader's batches add up to {r['samples']} samples, digest {r['digest']}; "
                          f"its report says {r['report_samples']}, {r['report_digest']}: {' '.join(cmd)}")
    r.update(child_summary(c))
    r["cmd"] = cmd
    return r


def feedline_run(a, tmp, root, fmt, tag, extra=()):
    """`feedline run ROOT --format FMT ... --json FILE`; returns a record of the report."""
    path = os.path.join(tmp, f"{tag}.json")
    cmd = [a.feedline, "run", root, "--format", fmt, "--batch-size", str(a.batch), "--epochs", "1",
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


def add_row(rows, job, metric, peer, unit, peer_runs, ours_runs, target, extra=None, lower=False):
    """A table row: the medians and ours/peer; target is the ratio to reach (at least, or with
    lower=True at most: CPU and memory), None for an info row."""
    pv = med(peer_runs) if peer_runs is not None else None
    ov = med(ours_runs)
    ratio = ov / pv if pv and ov is not None else None
    if target is None:
        status, tstr = "info", "-"
    else:
        tstr = f"{'<=' if lower else '>='}{target:.2f}"
        met = ratio is not None and (ratio <= target if lower else ratio >= target)
        status = "PASS" if met else "FAIL"
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

def setting_name(setting):
    workers, tensors = setting
    return f"nw={workers} {tensors}"


def job_dataset(a, job):
    """(dataset name, gen arguments, n) of a job under --dir."""
    fmt, size, n_full, n_quick = JOBS[job]
    n = getattr(a, job) or (n_quick if a.quick else n_full)
    gen_args = ["--format", fmt, "--samples", str(n), "--sample-size", size]
    if fmt == "tar":
        gen_args += ["--samples-per-shard", str(a.samples_per_shard), "--compress", "zstd",
                     "--compressibility", f"{a.compressibility:g}"]
    return f"{job}-{n}", gen_args, n


def run_job(a, tmp, job, report, rows, verdicts):
    fmt, size = JOBS[job][:2]
    name, gen_args, n = job_dataset(a, job)
    stamp = prepare(a, tmp, name, gen_args)
    root = os.path.join(a.dir, name)
    paths = list_samples(root)  # what is warmed before each run: every object feedline reads
    if fmt == "files":
        expected = n
    else:  # the shards and their indexes (feedline reads both; the peer the shards alone)
        expected = 2 * -(-n // a.samples_per_shard)
    if len(paths) != expected:
        raise ToolFailure(f"{root} holds {len(paths)} objects, expected {expected}: delete it and its "
                          f".stamp to generate it again")
    gen_digest = stamp["feedline_gen"].get("digest")
    settings = [(w, t) for w in (0, a.workers) for t in ("batch", "sample")]
    ours_sides = ["feedline", "python", "python-views"]
    jr = report["jobs"][job] = {
        "dataset": name, "root": root, "format": fmt, "samples": n, "objects": len(paths),
        "sample_size": size, "gen": stamp,
        "peer_settings": {setting_name(s): f"DataLoader num_workers={s[0]}, "
                          + ("one shared tensor per batch" if s[1] == "batch" else "per-sample tensors")
                          for s in settings},
        "peer": {setting_name(s): [] for s in settings}, "peer_best": [],
        "feedline": [], "python": [], "python-views": [], "stages_alone": None}
    for i in range(a.pairs):
        order = settings if i % 2 == 0 else settings[::-1]
        pair = {}
        for s in order:
            rec = {}
            rewarm(job, paths, rec)
            r = peer_run(a, tmp, root, fmt, s, f"{job}-peer-{s[0]}-{s[1]}-{i}")
            r.update(rec)
            if r["samples"] != n:
                raise ToolFailure(f"the peer ({setting_name(s)}) delivered {r['samples']} samples, expected {n}")
            pair[s] = r
            report["python"].setdefault("torch", r.get("torch"))
            report["python"].setdefault("xxhash", r.get("xxhash"))
            if r.get("zstandard"):
                report["python"].setdefault("zstandard", r.get("zstandard"))
            jr["peer"][setting_name(s)].append(r)
            log_run(job, i, a.pairs, f"peer {setting_name(s)}", r)
        best = max(settings, key=lambda s: pair[s]["samples_per_second"])
        jr["peer_best"].append(dict(pair[best], setting=setting_name(best)))
        ours = {}
        for side in (ours_sides if i % 2 == 0 else ours_sides[::-1]):
            rec = {}
            rewarm(job, paths, rec)
            if side == "feedline":
                r = feedline_run(a, tmp, root, fmt, f"{job}-ours-{i}")
                if r["digest"] is None:
                    raise ToolFailure("feedline's report has no delivered digest (samples not through host memory?)")
            else:
                touch = "torch" if side == "python" else "views"
                r = python_run(a, tmp, root, fmt, touch, f"{job}-{side}-{i}")
            r.update(rec)
            if r["samples"] != n:
                raise ToolFailure(f"{side} delivered {r['samples']} samples, expected {n}")
            ours[side] = r
            jr[side].append(r)
            log_run(job, i, a.pairs, {"feedline": "feedline run", "python": "python to_torch",
                                      "python-views": "python views"}[side], r)
        # Same bytes: the peer's checksum and the Python loop's sum of batch digests are feedline
        # run's delivered digest (and gen's).
        want = ours["feedline"]["digest"]
        for s in settings:
            if pair[s]["digest"] != want:
                raise ToolFailure(f"checksums differ: the peer ({setting_name(s)}) summed {pair[s]['digest']}, "
                                  f"feedline run delivered {want} (gen recorded {gen_digest})")
        for side in ours_sides[1:]:
            if ours[side]["digest"] != want:
                raise ToolFailure(f"checksums differ: the feedline.Loader loop ({side}) summed "
                                  f"{ours[side]['digest']}, feedline run delivered {want}")
        if gen_digest is not None and want != gen_digest:
            raise ToolFailure(f"feedline delivered digest {want}, gen recorded {gen_digest}")

    # The CPU ceiling, once per job: each stage alone on the whole dataset (decode and collate on
    # what fits half of feedline's memory budget), right after its own end-to-end run.
    rec = {}
    rewarm(job, paths, rec)
    sa_run = feedline_run(a, tmp, root, fmt, f"{job}-alone",
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

    # transform= a trivial Python function (it returns the sample's key), once per job: what the
    # report says of the GIL. The decode threads take the GIL for each call, while the training
    # loop's Python holds it between batches.
    rec = {}
    rewarm(job, paths, rec)
    tr_run = python_run(a, tmp, root, fmt, "views", f"{job}-transform", transform="trivial")
    tr_run.update(rec)
    jr["python-transform"] = tr_run
    tr = tr_run.get("transform") or {}
    if not tr or not tr.get("samples"):
        raise ToolFailure("the transform= run's report has no transform section")
    per = 1e6 / tr["samples"]
    print(f"[{job}] transform=trivial: {tr_run['report_samples_per_second']:.0f} smp/s; per sample "
          f"{tr['seconds'] * per:.2f} us in fn ({tr['cpu_seconds'] * per:.2f} us on the CPU), "
          f"{tr['lock_wait_seconds'] * per:.2f} us waiting for the GIL; off the CPU "
          f"{100 * tr['off_cpu_share']:.0f}% of fn's time, fn {100 * tr['decode_share']:.0f}% of decode's",
          file=sys.stderr, flush=True)

    peer_best, ours, py, pyv = jr["peer_best"], jr["feedline"], jr["python"], jr["python-views"]
    wins = {setting_name(s): sum(r["setting"] == setting_name(s) for r in peer_best) for s in settings}
    best_label = "DataLoader best (" + ", ".join(f"{w} x{k}" for w, k in wins.items() if k) + ")"
    bests = best_label.replace("best", "best's")
    others = {"others_cores_peer": [r["others_cores"] for r in peer_best],
              "others_cores_ours": [r["others_cores"] for r in ours],
              "resident_fraction_peer": [r["resident_fraction"] for r in peer_best],
              "resident_fraction_ours": [r["resident_fraction"] for r in ours]}
    sps = lambda runs: [r["samples_per_second"] for r in runs]  # noqa: E731
    cpu_k = lambda runs, key="cpu_seconds": [1e3 * r[key] / r["samples"] for r in runs]  # noqa: E731
    add_row(rows, job, "samples/s", best_label, "samples/s", sps(peer_best), sps(ours),
            TARGETS["samples/s"], extra=others)
    for s in settings:
        add_row(rows, job, "samples/s (info)", f"DataLoader {setting_name(s)}", "samples/s",
                sps(jr["peer"][setting_name(s)]), sps(ours), None)
    add_row(rows, job, "whole process (info)", bests, "samples/s",
            [r["samples"] / r["wall_seconds"] for r in peer_best],
            [r["samples"] / r["wall_seconds"] for r in ours], None)
    add_row(rows, job, "CPU/1k samples (info)", bests, "cpu-s/1k", cpu_k(peer_best), cpu_k(ours), None)
    # The same without the peer's fixed start-up (interpreter, import torch: ~2 CPU-s) and listing,
    # measured inside it around the loop; ours stays the whole process (start-up, listing included).
    add_row(rows, job, "CPU/1k, peer loop (info)", bests + " loop", "cpu-s/1k",
            cpu_k(peer_best, "loop_cpu_seconds"), cpu_k(ours), None)
    add_row(rows, job, "peak RSS (info)", "largest process", "bytes",
            [r["max_rss_bytes"] for r in peer_best], [r["max_rss_bytes"] for r in ours], None)
    add_row(rows, job, "peak RSS, tree (info)", "all processes, summed", "bytes",
            [r["tree_rss_peak_bytes"] for r in peer_best], [r["tree_rss_peak_bytes"] for r in ours], None)
    add_row(rows, job, "vs CPU ceiling", "--stages-alone ceiling", "samples/s",
            [ceiling] if ceiling else None, sps(ours), TARGETS["ceiling"],
            extra={"cpu_per_sample_us": sa.get("cpu_per_sample_us"), "cores": sa.get("cores"),
                   "stages_alone": sa.get("stages"),
                   "stages_alone_run_efficiency_vs_cpu_ceiling": sa.get("efficiency_vs_cpu_ceiling")})
    # Ours from Python (to_torch: a tensor per batch, as the peer's), both clocks from the dataset's
    # path to the last batch: ours from Loader() (it lists the dataset), the peer's from its
    # listing (Dataset, DataLoader and iter() included); CPU over the same span.
    py_others = {"others_cores_peer": others["others_cores_peer"],
                 "others_cores_ours": [r["others_cores"] for r in py]}
    listed = lambda runs: [r["listed_samples_per_second"] for r in runs]  # noqa: E731
    add_row(rows, job, "py samples/s", best_label + ", listing", "samples/s", listed(peer_best),
            sps(py), TARGETS["py samples/s"], extra=py_others)
    add_row(rows, job, "py samples/s, views (info)", best_label + ", listing", "samples/s",
            listed(peer_best), sps(pyv), None)
    add_row(rows, job, "py samples/s, after Loader() (info)", best_label, "samples/s", sps(peer_best),
            [r["samples"] / (r["loop_seconds"] - r["create_seconds"]) for r in py], None)
    add_row(rows, job, "py CPU/1k, loops", bests + " loop, listing", "cpu-s/1k",
            cpu_k(peer_best, "listed_loop_cpu_seconds"), cpu_k(py, "loop_cpu_seconds"),
            TARGETS["py CPU/1k"], lower=True)
    add_row(rows, job, "py CPU/1k, whole (info)", bests, "cpu-s/1k", cpu_k(peer_best), cpu_k(py), None)
    add_row(rows, job, "py peak RSS", "largest process", "bytes", [r["max_rss_bytes"] for r in peer_best],
            [r["max_rss_bytes"] for r in py], TARGETS["py peak RSS"], lower=True)
    add_row(rows, job, "py peak RSS, tree (info)", "all processes, summed", "bytes",
            [r["tree_rss_peak_bytes"] for r in peer_best], [r["tree_rss_peak_bytes"] for r in py], None)
    above = lambda runs: [r["max_rss_bytes"] - r["rss_before_loop_bytes"] for r in runs  # noqa: E731
                          if r.get("rss_before_loop_bytes") is not None]
    add_row(rows, job, "py RSS above start (info)", "largest minus main's at loop start", "bytes",
            above(peer_best), above(py), None)
    # Binding overhead: the Python loop against `feedline run`, on the same clock (the report's
    # samples_per_second), and on the loop's own clock (Loader() to the last batch).
    add_row(rows, job, "py views vs run", "feedline run", "samples/s", sps(ours),
            [r["report_samples_per_second"] for r in pyv], TARGETS["py vs run"],
            extra={"others_cores_peer": others["others_cores_ours"],
                   "others_cores_ours": [r["others_cores"] for r in pyv]})
    add_row(rows, job, "py views, own clock (info)", "feedline run", "samples/s", sps(ours), sps(pyv), None)
    add_row(rows, job, "py transform=fn (info)", "py views", "samples/s",
            [r["report_samples_per_second"] for r in pyv],
            [jr["python-transform"]["report_samples_per_second"]], None)
    add_row(rows, job, "py to_torch vs run (info)", "feedline run", "samples/s", sps(ours),
            [r["report_samples_per_second"] for r in py], None)
    verdicts.append((job, median_run(ours)))
    verdicts.append((f"{job} (Python, to_torch)", median_run(py)))


# --- main ----------------------------------------------------------------------------------------

def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--peer":
        return peer(sys.argv[1:])
    if len(sys.argv) > 1 and sys.argv[1] == "--python-loop":
        return python_loop(sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--jobs", default=",".join(JOBS))
    for job in JOBS:
        ap.add_argument(f"--{job}", type=int)
    ap.add_argument("--samples-per-shard", type=int, default=1000)
    ap.add_argument("--compressibility", type=float, default=0.0)
    ap.add_argument("--shuffle-buffer", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--feedline", required=True)
    ap.add_argument("--pythonpath", required=True, help="the folder holding the feedline package")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    jobs = [j for j in a.jobs.split(",") if j]
    for j in jobs:
        if j not in JOBS:
            ap.error(f"unknown job {j}")
    if a.workers < 1:
        ap.error("--workers must be at least 1")
    if a.samples_per_shard < 1 or a.shuffle_buffer < 1:
        ap.error("--samples-per-shard and --shuffle-buffer must be at least 1")
    if not 0 <= a.compressibility <= 1:
        ap.error("--compressibility must be in [0, 1]")
    if a.quick:
        a.pairs = max(2, a.pairs - 1)
    print(f"compare-torch: dir={a.dir} pairs={a.pairs} jobs={','.join(jobs)} batch={a.batch} "
          f"workers=0,{a.workers}{' quick' if a.quick else ''}\n  feedline: {a.feedline}\n"
          f"  feedline package: {a.pythonpath}\n  python: {sys.executable} {sys.version.split()[0]}",
          file=sys.stderr, flush=True)
    report = {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release(),
        "python": {"path": sys.executable, "version": sys.version.split()[0]},
        "dir": a.dir, "pairs": a.pairs, "quick": a.quick, "batch": a.batch, "workers": a.workers,
        "samples_per_shard": a.samples_per_shard, "compressibility": a.compressibility,
        "shuffle_buffer": a.shuffle_buffer,
        "feedline": {"path": a.feedline, "pythonpath": a.pythonpath},
        "timing": {"peer": "the epoch loop: iter(DataLoader) (worker start) to the last batch (worker "
                           "shutdown); not interpreter start, import torch or the listing",
                   "ours": "feedline's samples_per_second: delivered samples / wall_seconds, the consumer's "
                           "clock from the pipeline's start (after the listing) to the last batch",
                   "python": "feedline.Loader(...) (its listing included) to the last batch, in a "
                             "/usr/bin/python3 child after import torch and feedline; rows 'vs run' use "
                             "its report's samples_per_second, feedline run's clock",
                   "whole_process": "samples / wall time from exec to exit, both sides"},
        "cpu_measure": "user+sys of the child and its waited-for descendants, getrusage(RUSAGE_CHILDREN) "
                       "deltas; loop_cpu_seconds: getrusage(SELF+CHILDREN) deltas inside the child "
                       "around its timed loop; max_rss_bytes: wait4's ru_maxrss (the largest single "
                       "process); tree_rss_peak_bytes: summed RSS of the process tree, sampled every "
                       "20 ms; others_cores: busy CPU of the whole machine (/proc/stat) minus the "
                       "child's, per wall second",
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


def all_runs(job_report):
    """Every run of a job's three sides."""
    j = job_report
    return [r for rs in j["peer"].values() for r in rs] + j["feedline"] + j["python"] + j["python-views"]


def print_table(a, report, rows, verdicts):
    pw = max([len("peer")] + [len(r["peer"]) for r in rows])  # the best's label grows with its settings
    header = (f"{'job':9s} {'metric':27s} {'peer':{pw}s} {'peer(median)':>13s} {'ours(median)':>13s} "
              f"{'ratio':>6s}  {'target':6s}")
    print()
    print(header)
    print("-" * (len(header) + 5))
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"{r['job']:9s} {r['metric']:27s} {r['peer']:{pw}s} {fmt_value(r['unit'], r['peer_median']):>13s} "
              f"{fmt_value(r['unit'], r['ours_median']):>13s} {ratio:>6s}  {r['target']:6s} {r['status']}")
    graded = [r for r in rows if r["status"] != "info"]
    passed = sum(r["status"] == "PASS" for r in graded)
    print(f"\n{passed}/{len(graded)} targets met (ratio = ours/peer of the medians; higher is better, "
          "except CPU/1k samples and RSS: lower is better)")
    print(f"peer: torch.utils.data.DataLoader, batches of {a.batch}, num_workers 0 and {a.workers}, each with\n"
          f"  one shared tensor per batch (default_collate) and with per-sample tensors; files jobs: a\n"
          f"  map-style Dataset (open + read + XXH3-64 per file, shuffle=True); shards: a WebDataset-style\n"
          f"  IterableDataset (tarfile 'r|' per shard, shards split over workers, zstandard, XXH3-64 per\n"
          f"  member, shuffle buffer {a.shuffle_buffer}); 'best' is the fastest setting in each pair; its checksum\n"
          f"  equalled feedline's delivered digest in every run\n"
          f"ours: `feedline run`; 'py' rows: feedline.Loader in /usr/bin/python3, batch.to_torch() per batch\n"
          f"  ('views': batch.member() zero-copy views); its sum of batch.digest equalled feedline run's digest\n"
          f"timed: peer = the epoch loop (worker start and shutdown included); ours = feedline's\n"
          f"  samples_per_second (pipeline start, after the listing, to the last batch); py = Loader()\n"
          f"  (listing included) to the last batch, but 'vs run' rows take its report's samples_per_second,\n"
          f"  feedline run's clock; 'whole process' = exec to exit\n"
          f"CPU: user+sys of the whole process tree, exec to exit; 'loop' rows count only the timed loop\n"
          f"  (getrusage inside the child: the peer's workers included, start-up and import torch not);\n"
          f"  peak RSS 'tree' sums every process's RSS (the peer's forked workers count their shared pages\n"
          f"  again); 'above start' subtracts the main process's RSS before the loop (after import torch)\n"
          f"vs CPU ceiling: ours against one `feedline run --stages-alone` per job: cores / (CPU-seconds\n"
          f"  per sample of storage, decode and collate alone, added up)")
    fracs = [r["resident_fraction"] for j in report["jobs"].values() for r in all_runs(j)]
    if fracs:
        low = min(fracs)
        print(f"page cache: {low:.1%}-{max(fracs):.1%} of the files' pages resident before the runs (fincore)"
              + (f"  WARNING: below {RESIDENT_WARN:.0%}: some runs read from storage" if low < RESIDENT_WARN else ""))
    others = [r["others_cores"] for j in report["jobs"].values() for r in all_runs(j)
              if r.get("others_cores") is not None]
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
    transforms = [(j, jr["python-transform"]) for j, jr in report["jobs"].items()
                  if jr.get("python-transform")]
    if transforms:
        print("\nfeedline.Loader(transform=a trivial Python function), one run per job: its report's "
              "transform section")
        for j, r in transforms:
            tr = r["transform"]
            per = 1e6 / tr["samples"]
            b = r.get("bottleneck") or {}
            print(f"  {j}: {r['report_samples_per_second']:.0f} smp/s; per sample {tr['seconds'] * per:.2f} us "
                  f"in fn, {tr['lock_wait_seconds'] * per:.2f} us of it waiting for the GIL at entry; "
                  f"off the CPU {100 * tr['off_cpu_share']:.0f}% of fn's time (the GIL, mid-call too); "
                  f"fn {100 * tr['decode_share']:.0f}% of decode's time\n    verdict: {b.get('stage')}: "
                  f"{b.get('suggestion')}")
    print(f"raw runs and table: {a.out}")


if __name__ == "__main__":
    sys.exit(main())
