#!/usr/bin/python3
"""Driver for bench/compare-jpeg.sh: feedline's JPEG decode against Pillow + torchvision.

Normally started by compare-jpeg.sh (its header documents each side, metric and job). The driver
uses the standard library and compare_torch.py's helpers (child processes, their CPU and RSS, the
page cache); its children run under the same interpreter:
  compare_jpeg.py --peer-core DIR N          decode + RandomResizedCrop(224) of N JPEGs on one core
  compare_jpeg.py --peer-loader DIR W B      a DataLoader of W workers over DIR's tar shards
"""

import argparse
import datetime
import glob
import io
import json
import os
import sys
import tarfile
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_torch as ct  # noqa: E402  (run_child, prepare, warm_cache, resident_fraction, ...)

MASK64 = (1 << 64) - 1
TARGETS = {"per core": 1.5, "end to end": 2.0, "diagnose": 0.10}


def tar_samples(t):
    """The samples of an open tarfile, as webdataset groups them: runs of members sharing a key
    (the name up to its first dot), each a dict of extension -> bytes, plus "key"."""
    cur = {}
    for m in t:
        if not m.isfile():
            continue
        key, ext = m.name.split(".", 1)
        if cur and cur["key"] != key:
            yield cur
            cur = {}
        cur["key"] = key
        cur[ext] = t.extractfile(m).read()
    if cur:
        yield cur


def jpegs_of(root):
    """(key, JPEG bytes, label bytes) of every sample in DIR's tar shards, in storage order."""
    out = []
    for shard in sorted(glob.glob(os.path.join(root, "*.tar"))):
        with tarfile.open(shard) as t:
            out += [(c["key"], c.get("jpg"), c.get("cls")) for c in tar_samples(t)]
    return out


# --- the peer's children -----------------------------------------------------------------------

def peer_core(argv):
    """Decode + RandomResizedCrop(224) + PILToTensor of N JPEGs held in memory, one thread."""
    root, n = argv[0], int(argv[1])
    import torch
    import torchvision.transforms as T
    import xxhash
    from PIL import Image
    torch.set_num_threads(1)
    data = [j for _, j, _ in jpegs_of(root)][:n]
    rrc, to_tensor = T.RandomResizedCrop(224), T.PILToTensor()
    torch.manual_seed(0)
    check = 0
    cpu0, t0 = time.process_time(), time.monotonic()
    for b in data:
        img = Image.open(io.BytesIO(b)).convert("RGB")
        x = to_tensor(rrc(img))
        assert x.shape == (3, 224, 224)
        check = (check + xxhash.xxh3_64_intdigest(b)) & MASK64
    cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
    print(json.dumps({"images": len(data), "loop_cpu_seconds": cpu, "loop_seconds": wall,
                      "checksum": check}))


def peer_loader(argv):
    """A WebDataset-style IterableDataset over the tar shards (split over the workers), each
    sample decoded by Pillow, cut by RandomResizedCrop(224), made a CHW uint8 tensor; batches by
    default_collate (one tensor per batch, in shared memory from a worker)."""
    root, workers, batch = argv[0], int(argv[1]), int(argv[2])
    import torch
    import torchvision.transforms as T
    import xxhash
    from PIL import Image
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    shards = sorted(glob.glob(os.path.join(root, "*.tar")))

    class Shards(IterableDataset):
        def __init__(self):
            self.rrc, self.to_tensor = T.RandomResizedCrop(224), T.PILToTensor()

        def sample(self, cur):
            img = Image.open(io.BytesIO(cur["jpg"])).convert("RGB")
            h = (xxhash.xxh3_64_intdigest(cur["jpg"]) + xxhash.xxh3_64_intdigest(cur["cls"])) & MASK64
            return self.to_tensor(self.rrc(img)), int(cur["cls"]), str(h)

        def __iter__(self):
            info = get_worker_info()
            mine = shards[info.id::info.num_workers] if info else shards
            for path in mine:
                with open(path, "rb") as f, tarfile.open(fileobj=f, mode="r|") as t:
                    for cur in tar_samples(t):
                        yield self.sample(cur)

    loader = DataLoader(Shards(), batch_size=batch, num_workers=workers)
    samples, check = 0, 0
    r0 = ct.cpu_now()
    t0 = time.monotonic()
    for x, y, h in loader:
        assert x.dtype == torch.uint8 and x.shape[1:] == (3, 224, 224)
        samples += x.shape[0]
        for v in h:
            check = (check + int(v)) & MASK64
    wall = time.monotonic() - t0
    print(json.dumps({"samples": samples, "loop_seconds": wall, "samples_per_second": samples / wall,
                      "loop_cpu_seconds": ct.cpu_now() - r0, "checksum": check}))


# --- the driver ---------------------------------------------------------------------------------

def rewarm(paths, rec, what):
    rec["rewarm_seconds"] = ct.warm_cache(paths)
    frac, _ = ct.resident_fraction(paths)
    rec["resident_fraction"] = frac
    if frac < ct.RESIDENT_WARN:
        print(f"[{what}] warning: only {frac:.1%} of the shards were resident before this run",
              file=sys.stderr, flush=True)


def peer_child(a, tmp, args, tag):
    c = ct.run_child([sys.executable, os.path.abspath(__file__), *args], tmp, tag)
    rec = ct.parse_json(c["stdout"], "the peer")
    rec.update(ct.child_summary(c))
    return rec


def ours(a, tmp, root, tag, extra):
    rec = ct.feedline_run(a, tmp, root, "tar", tag, ["--image-size", "224", "--crop", "random-resized",
                                                     *extra])
    return rec


def ratio(x, y):
    return x / y if x and y else None


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--peer-core":
        return peer_core(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "--peer-loader":
        return peer_loader(sys.argv[2:])
    p = argparse.ArgumentParser(description="feedline JPEG decode vs Pillow + torchvision")
    p.add_argument("--feedline", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--samples", type=int, default=4000)
    p.add_argument("--image", default="jpeg:400x350")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--core-images", type=int, default=1000)
    p.add_argument("--jobs", default="core,e2e,diagnose")
    a = p.parse_args()
    jobs = a.jobs.split(",")
    os.makedirs(a.dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="compare-jpeg-")
    gen_args = ["--format", "tar", "--samples", str(a.samples), "--samples-per-shard", "500",
                "--image", a.image, "--seed", "1"]
    stamp = ct.prepare(a, tmp, "jpeg-" + a.image.replace(":", "-"), gen_args)
    root = os.path.join(a.dir, "jpeg-" + a.image.replace(":", "-"))
    paths = sorted(glob.glob(os.path.join(root, "*.tar*")))
    gen_digest = stamp["feedline_gen"]["digest"]
    report = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "image": a.image,
              "samples": a.samples, "pairs": a.pairs, "workers": a.workers, "batch": a.batch,
              "gen": stamp["feedline_gen"], "jobs": {}}
    rows = []

    if "core" in jobs:
        # One core each: Pillow's CPU per image in its loop; feedline's decode stage alone on one
        # thread (--stages-alone: the pipeline's decode on samples cached in memory).
        runs = {"peer": [], "ours": []}
        n = min(a.core_images, a.samples)
        for i in range(a.pairs):
            order = ["peer", "ours"] if i % 2 == 0 else ["ours", "peer"]
            for side in order:
                rec = {}
                rewarm(paths, rec, "core")
                if side == "peer":
                    r = peer_child(a, tmp, ["--peer-core", root, str(n)], f"core-peer-{i}")
                    r["cpu_us_per_image"] = 1e6 * r["loop_cpu_seconds"] / r["images"]
                else:
                    r = ours(a, tmp, root, f"core-ours-{i}",
                             ["--decode-threads", "1", "--stages-alone", "--stages-alone-samples",
                              str(n)])
                    dec = next(s for s in r["stages_alone"]["stages"] if s["stage"] == "decode")
                    r["cpu_us_per_image"] = 1e6 * dec["cpu_seconds"] / dec["samples"]
                r.update(rec)
                runs[side].append(r)
                print(f"[core] pair {i + 1}/{a.pairs} {side}: {r['cpu_us_per_image']:.0f} CPU-us an "
                      f"image", file=sys.stderr, flush=True)
        peer_us = ct.med([r["cpu_us_per_image"] for r in runs["peer"]])
        ours_us = ct.med([r["cpu_us_per_image"] for r in runs["ours"]])
        rows.append(("per core: decode + random-resized crop 224, CPU-us an image (lower is better)",
                     peer_us, ours_us, ratio(peer_us, ours_us), TARGETS["per core"]))
        report["jobs"]["core"] = runs

    if "e2e" in jobs:
        runs = {"peer": [], "peer0": [], "ours": []}
        for i in range(a.pairs):
            order = ["peer", "peer0", "ours"] if i % 2 == 0 else ["ours", "peer0", "peer"]
            for side in order:
                rec = {}
                rewarm(paths, rec, "e2e")
                if side == "ours":
                    r = ours(a, tmp, root, f"e2e-ours-{i}", ["--decode-threads", str(a.workers)])
                    if r["digest"] != gen_digest:
                        raise ct.ToolFailure(f"feedline's digest {r['digest']} is not gen's {gen_digest}")
                else:
                    workers = a.workers if side == "peer" else 0
                    r = peer_child(a, tmp, ["--peer-loader", root, str(workers), str(a.batch)],
                                   f"e2e-{side}-{i}")
                    if r["checksum"] != gen_digest:
                        raise ct.ToolFailure(f"the peer's checksum {r['checksum']} is not gen's {gen_digest}")
                r.update(rec)
                runs[side].append(r)
                print(f"[e2e] pair {i + 1}/{a.pairs} {side}: {r['samples_per_second']:.0f} samples/s, "
                      f"{r['cpu_seconds']:.2f} CPU-s, peak RSS {r['max_rss_bytes'] / ct.MiB:.0f} MiB",
                      file=sys.stderr, flush=True)
        sps = {k: ct.med([r["samples_per_second"] for r in v]) for k, v in runs.items()}
        cpu = {k: ct.med([1000 * r["cpu_seconds"] / a.samples for r in v]) for k, v in runs.items()}
        rss = {k: ct.med([r["max_rss_bytes"] / ct.MiB for r in v]) for k, v in runs.items()}
        rows.append((f"end to end: samples/s vs DataLoader(num_workers={a.workers})", sps["peer"],
                     sps["ours"], ratio(sps["ours"], sps["peer"]), TARGETS["end to end"]))
        rows.append(("end to end: samples/s vs DataLoader(num_workers=0) (info)", sps["peer0"],
                     sps["ours"], ratio(sps["ours"], sps["peer0"]), None))
        rows.append(("end to end: CPU-s per 1,000 samples, whole process (info)", cpu["peer"],
                     cpu["ours"], ratio(cpu["ours"], cpu["peer"]), None))
        rows.append(("end to end: peak RSS MiB (info)", rss["peer"], rss["ours"],
                     ratio(rss["ours"], rss["peer"]), None))
        report["jobs"]["e2e"] = runs

    if "diagnose" in jobs:
        # Too few decode threads: the verdict must name decode, and diagnose's prediction for
        # more threads is set against what a run with them achieves.
        rec = {}
        rewarm(paths, rec, "diagnose")
        path = os.path.join(tmp, "diagnose.json")
        cmd = [a.feedline, "diagnose", root, "--batch-size", str(a.batch), "--image-size", "224",
               "--crop", "random-resized", "--decode-threads", "1", "--duration", "4s", "--verify",
               "--what-if", f"decode-threads={a.workers}", "--json", path]
        ct.run_child(cmd, tmp, "diagnose")
        d = json.load(open(path))
        w = next(x for x in d["what_if"] if x["what_if"] == f"decode-threads={a.workers}")
        rec.update({"verdict": d["bottleneck"]["stage"], "what_if": w["what_if"],
                    "predicted": w["predicted_samples_per_second"],
                    "achieved": w.get("achieved_samples_per_second"), "error": w.get("error")})
        report["jobs"]["diagnose"] = rec

    print()
    print(f"feedline JPEG decode vs Pillow {pil_version()} + torchvision, {a.samples} JPEGs "
          f"({a.image}, mean {stamp['feedline_gen']['bytes_stored'] / a.samples / 1024:.0f} KiB), "
          f"{a.pairs} alternating pairs, medians")
    print(f"  {'metric':<78} {'peer':>10} {'feedline':>10} {'ratio':>7}  target")
    for name, peer, mine, r, target in rows:
        tgt = ""
        if target is not None and r is not None:
            tgt = f">= {target:g} " + ("met" if r >= target else "MISSED")
        print(f"  {name:<78} {fmt(peer):>10} {fmt(mine):>10} {fmt(r, 2):>7}  {tgt}")
    if "diagnose" in report["jobs"]:
        r = report["jobs"]["diagnose"]
        err = r["error"]
        met = err is not None and abs(err) <= TARGETS["diagnose"]
        print(f"  diagnose with 1 decode thread: verdict {r['verdict']} "
              f"({'right' if r['verdict'] == 'decode' else 'WRONG: want decode'}); {r['what_if']}: "
              f"predicted {fmt(r['predicted'])}/s, achieved {fmt(r['achieved'])}/s, error "
              f"{'-' if err is None else '%+.1f%%' % (100 * err)} (target |error| <= "
              f"{TARGETS['diagnose']:.0%}: {'met' if met else 'MISSED'})")
    report["rows"] = [{"metric": n, "peer": p_, "ours": o, "ratio": r, "target": t}
                      for n, p_, o, r, t in rows]
    with open(a.out, "w") as f:
        json.dump(report, f, indent=2, default=str)
    print(f"raw runs and table: {a.out}")
    return 0


def fmt(v, digits=None):
    if v is None:
        return "-"
    if digits is not None:
        return f"{v:.{digits}f}"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.2f}"


def pil_version():
    try:
        import PIL
        return PIL.__version__
    except ImportError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
