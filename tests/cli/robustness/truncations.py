#!/usr/bin/env python3
"""Cuts every object of a small dataset at many offsets (every byte near its structure's
boundaries: tar headers, TFRecord framing, zip records and .npy headers) and runs
`feedline run` over each cut dataset, with --on-error fail and skip.

Each run must end within a time bound with exit 0 (the cut left a valid, shorter dataset: a tar
cut between members, a TFRecord file between records) or 1 (a data error: one
"feedline: error:" line naming the object), never 2 (not a usage error), never a crash or a
hang; exit 0 must deliver no more samples than the whole dataset holds, and with --on-error skip
a cut file must never fail the run.

usage: truncations.py FEEDLINE SCRATCH FORMAT... (tar, tar-index, tfrecord, tfrecord-index, npz,
npy, files); prints "ok: ..." / "FAIL: ..." lines and exits 1 on any failure.
"""
import json
import os
import shutil
import subprocess
import sys
import time

CRASH = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "Segmentation fault", "internal error",
         "terminate called", "Aborted", "runtime error:")
TIMEOUT = 30


def run(binary, args):
    t0 = time.monotonic()
    try:
        p = subprocess.run([binary] + args, capture_output=True, text=True, timeout=TIMEOUT)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return 124, "", "hung", TIMEOUT


def offsets(size, fmt, record=0):
    """Every byte near a boundary of the format's structure (a sample of the bytes between)."""
    cuts = set()
    if fmt.startswith("tar"):
        for b in range(0, size + 1, 512):  # each block: its edges, a header's size and type fields
            cuts.update((b - 1, b, b + 1, b + 124, b + 156))
    elif fmt.startswith("tfrecord"):
        cuts.update(range(0, record + 1))  # every byte of the first record
        for b in range(0, size + 1, record):
            cuts.update((b - 1, b, b + 1, b + 8, b + 12))
    elif fmt == "npz":
        cuts.update(range(0, size + 1, 13))
        cuts.update(range(max(0, size - 100), size + 1, 3))  # the zip directory and end records
    else:
        cuts.update(range(0, min(size, 200) + 1, 4))
    return sorted(c for c in cuts if 0 <= c < size)


def main():
    binary, scratch, formats = sys.argv[1], sys.argv[2], sys.argv[3:]
    failures = checks = 0
    for fmt in formats:
        base = os.path.join(scratch, "trunc-" + fmt)
        shutil.rmtree(base, ignore_errors=True)
        gen_fmt = fmt.split("-")[0]
        extra = {"tar": ["--samples-per-shard", "3"], "tfrecord": ["--samples-per-file", "3"]}.get(gen_fmt, [])
        rc, out, err, _ = run(binary, ["gen", base, "--format", gen_fmt, "--samples", "6",
                                       "--sample-size", "40", "--seed", "3"] + extra)
        if rc != 0:
            print(f"FAIL: gen {fmt}: exit {rc}: {err.strip()}")
            failures += 1
            continue
        os.remove(os.path.join(base, ".feedline-dataset"))  # a user's dataset: nothing to compare
        if not fmt.endswith("-index"):
            for f in os.listdir(base):
                if f.endswith(".idx"):
                    os.remove(os.path.join(base, f))
        objects = sorted(f for f in os.listdir(base) if not f.endswith(".idx"))
        target = os.path.join(base, objects[0])
        whole = open(target, "rb").read()
        bad = []
        cuts = offsets(len(whole), fmt, record=40 + 16)
        for n, cut in enumerate(cuts):
            open(target, "wb").write(whole[:cut])
            for mode in ("fail", "skip") if n % 3 == 0 else ("fail",):
                checks += 1
                rc, out, err, took = run(binary, ["run", base, "--on-error", mode, "--json", base + ".json"])
                why = None
                if rc == 124:
                    why = "hung"
                elif any(m in out + err for m in CRASH):
                    why = "crashed"
                elif rc not in (0, 1):
                    why = f"exit {rc}"
                elif rc == 1 and not err.startswith("feedline: error: "):
                    why = "exit 1 without an error line"
                elif rc == 1 and mode == "skip":
                    why = "--on-error skip failed the run"
                elif rc == 0:
                    try:
                        d = json.load(open(base + ".json"))
                        if d["delivered"]["samples"] > 6:
                            why = f"delivered {d['delivered']['samples']} samples of 6"
                    except Exception as e:  # noqa: BLE001
                        why = f"no JSON report ({e})"
                if why:
                    bad.append(f"cut at {cut} of {len(whole)}, --on-error {mode}: {why}: "
                               f"{err.strip().splitlines()[-1] if err.strip() else ''}")
        open(target, "wb").write(whole)
        if bad:
            failures += len(bad)
            print(f"FAIL: {fmt}: {len(bad)} cut(s) of {objects[0]} misbehaved, e.g.")
            for b in bad[:5]:
                print("    " + b)
        else:
            print(f"ok: {fmt}: {objects[0]} cut at {len(cuts)} offsets: exit 0 or 1, "
                  "named, no hang or crash")
    print(f"truncations: {checks} runs, {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
