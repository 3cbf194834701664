"""One job report under torch.distributed (gloo), ranks started as torchrun starts them: each
process with MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK set (Debian's torchrun
does not run on Python 3.11: the launcher here is the test's own). Rank 0's report() after the
pass is the job's: every rank in "ranks", the digests adding up to the dataset's, a throttled
rank named the straggler; a rank killed mid-epoch is named within job_timeout."""
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from support import gen, manifest_digest, M64

pytest.importorskip("torch.distributed")

RANK = """
import json, os, sys
import torch
import torch.distributed as dist
import feedline.torch
dist.init_process_group("gloo")
rank = dist.get_rank()
url, out, throttled, die_at, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
options = dict(batch_size=16, shuffle=True, seed=5, decode_threads=1, io_depth=4,
               job_timeout=timeout)
if rank == throttled:
    options["throttle_bw"] = "2MiB"
ds = feedline.torch.IterableDataset(url, **options)
loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
for i, batch in enumerate(loader):
    if i == die_at:
        os._exit(9)  # a rank that dies mid-epoch, as a killed process does
try:
    doc = ds.report()
except Exception as e:  # noqa: BLE001
    doc = {"raised": type(e).__name__, "message": str(e)}
with open(out, "w") as f:
    json.dump(doc, f)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world, url, tmp_path, throttled=-1, die=(-1, -1), timeout=60.0):
    """Starts `world` ranks with torchrun's environment; returns each one's (exit code, report
    document, stderr) once all have ended."""
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(world), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world))
        die_at = die[1] if r == die[0] else -1
        out = str(tmp_path / ("rank%d.json" % r))
        procs.append((subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(RANK), url, out, str(throttled), str(die_at),
             str(timeout)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
            out))
    results = []
    for p, out in procs:
        _, err = p.communicate(timeout=240)
        doc = json.load(open(out)) if os.path.exists(out) else None
        results.append((p.returncode, doc, err))
    return results


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return gen(tmp_path_factory.mktemp("dist") / "ds", "--format", "tar", "--samples", "960",
               "--sample-size", "4KiB", "--samples-per-shard", "120")


@pytest.mark.parametrize("world", [2, 3])
def test_rank_0_reports_the_job_with_its_straggler(dataset, tmp_path, world):
    throttled = world - 1
    results = launch(world, dataset, tmp_path, throttled=throttled)
    for rc, _, err in results:
        assert rc == 0, err
    job = results[0][1]
    assert "raised" not in job, job
    assert [r["rank"] for r in job["ranks"]] == list(range(world))
    assert all(r["host"] == socket.gethostname() for r in job["ranks"])
    assert job["torch_distributed"] == {"ranks": world, "hosts": 1}
    # The ranks' own reports stay their own, and add up to the job's.
    own = [results[r][1] for r in range(1, world)]
    assert all("ranks" not in d for d in own)
    assert job["samples"] == sum(r["samples"] for r in job["ranks"]) == 960 // (16 * world) * 16 * world
    digests = sum(r["delivered"]["digest"] for r in job["ranks"]) % M64
    assert job["delivered"]["digest"] == digests == manifest_digest(dataset)
    # The throttled rank holds the job back: rank 0 names it, and its storage.
    s = job["stragglers"]
    assert s["rank"] == throttled and s["straggler"] is True, s
    assert s["bottleneck"] == "storage" and "storage" in s["cause"], s
    assert {"au_min", "au_mean", "au_max", "mlperf", "bottleneck", "stages"} <= set(job)


def test_a_rank_killed_mid_epoch_is_named_within_the_timeout(dataset, tmp_path):
    t0 = time.monotonic()
    results = launch(3, dataset, tmp_path, die=(2, 3), timeout=5.0)
    took = time.monotonic() - t0
    assert results[2][0] == 9
    rc, job, err = results[0]
    assert rc == 0, err
    assert job["raised"] == "Error", job
    assert "rank 2 of 3" in job["message"] and "job_timeout=5s" in job["message"], job
    assert took < 60, took


def test_job_timeout_is_checked():
    import feedline
    with pytest.raises(ValueError, match="job_timeout"):
        feedline.Loader("/nonexistent", job_timeout=0)
