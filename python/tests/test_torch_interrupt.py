"""Ctrl-C and kill -9 through feedline.torch: a training script's child process iterating
torch.utils.data.DataLoader(feedline.torch.IterableDataset(...), batch_size=None, num_workers=0).

Each test runs /usr/bin/python3 in a child process (sys.executable, with this process's
environment: under ASan it carries the preloaded runtime) and sends it the signal a user would.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from support import M64, gen, manifest_digest, run_all

pytest.importorskip("torch")

import feedline  # noqa: E402  (after the torch check: these tests are about feedline.torch)

# A user's Ctrl-C must surface within about a second (the native wait wakes every 100 ms).
PROMPT_S = 1.0


@pytest.fixture(scope="module")
def slow_ds(tmp_path_factory):
    """A files dataset whose data reads take 5 s each (throttle_latency below) and whose open
    reads nothing: without gen's manifest, opening a files dataset only lists it, so the loader
    exists at once and the iteration waits for its first batch when the signal comes."""
    ds = gen(tmp_path_factory.mktemp("slow") / "ds", "--format", "files", "--samples", "64",
             "--sample-size", "4k")
    os.remove(os.path.join(ds, ".feedline-dataset"))
    return ds


@pytest.fixture(scope="module")
def files_ds(tmp_path_factory):
    return gen(tmp_path_factory.mktemp("files") / "ds", "--format", "files", "--samples", "400",
               "--sample-size", "16k")


def child(code, *args, stderr=subprocess.PIPE, cwd=None):
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args],
                            stdout=subprocess.PIPE, stderr=stderr, text=True, env=os.environ,
                            cwd=cwd)


def wait_line(p, want, timeout=60):
    """The child's next stdout line, which must be `want` (torch's import takes a second or more,
    much more under ASan)."""
    line = p.stdout.readline().strip()
    if line != want:
        p.kill()
        out, err = p.communicate(timeout=timeout)
        raise AssertionError("child said %r, not %r; stderr:\n%s" % (line, want, err))


# The child says "ready" once DataLoader's first next() has opened the pass's Loader (its
# state_dict() then has the loader's state): the main thread then waits for the first batch.
DATALOADER = """
    import json, sys, threading, time
    import torch
    import feedline.torch as ftorch
    ds = ftorch.IterableDataset(sys.argv[1], batch_size=8, throttle_latency="5s", io_depth=2)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    def say_ready():
        while ds.state_dict()["loader"] is None:
            time.sleep(0.01)
        print("ready", flush=True)
    threading.Thread(target=say_ready, daemon=True).start()
"""


def test_ctrl_c_in_dataloader_surfaces_within_a_second_and_report_works(slow_ds):
    # After the KeyboardInterrupt: report() says the run was interrupted, and state_dict()
    # resumes it (here without the planted latency) with nothing lost: all 64 samples once.
    p = child(DATALOADER + """
    try:
        for batch in dl:
            print("got a batch", flush=True)
    except KeyboardInterrupt:
        caught = time.monotonic()
        r = ds.report()
        report_s = time.monotonic() - caught
        again = ftorch.IterableDataset(sys.argv[1], batch_size=8, io_depth=2)
        again.load_state_dict(ds.state_dict())
        keys = [k for b in torch.utils.data.DataLoader(again, batch_size=None) for k in b.keys]
        print(json.dumps({"caught": caught, "report_s": report_s,
                          "interrupted": r["interrupted"], "batches": r["batches"],
                          "resumed_keys": len(keys), "resumed_unique": len(set(keys))}))
        print(time.monotonic(), flush=True)
        sys.exit(0)
    print("not interrupted", flush=True)
    sys.exit(1)
    """, slow_ds)
    wait_line(p, "ready")
    time.sleep(0.3)  # inside DataLoader's next(), waiting on the first 5 s reads
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail("the child hung after SIGINT:\n%s\n%s" % (out, err))
    gone = time.monotonic()
    assert p.returncode == 0, out + err
    lines = out.strip().splitlines()
    r = json.loads(lines[-2])
    # time.monotonic() is CLOCK_MONOTONIC: one clock for both processes.
    latency = r["caught"] - sent
    exit_s = gone - float(lines[-1])
    print("KeyboardInterrupt %.3f s after SIGINT, report %.3f s, exit %.3f s"
          % (latency, r["report_s"], exit_s))
    assert latency < PROMPT_S, "KeyboardInterrupt came %.2f s after SIGINT" % latency
    assert r["interrupted"] is True and r["batches"] == 0
    assert r["resumed_keys"] == r["resumed_unique"] == 64
    # The interrupted run's 5 s reads, still in flight, do not hold the exit.
    assert exit_s < 3.0, "the child took %.1f s to exit" % exit_s


def test_uncaught_ctrl_c_ends_the_process_promptly(slow_ds):
    # No handler, as in most training scripts: Python ends by SIGINT (its exit for an uncaught
    # KeyboardInterrupt), with no hang in joining the loader's threads and no crash.
    p = child(DATALOADER + """
    for batch in dl:
        pass
    """, slow_ds)
    wait_line(p, "ready")
    time.sleep(0.3)
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("the child hung after SIGINT: %s" % p.communicate()[1])
    exited = time.monotonic() - sent
    assert p.returncode == -signal.SIGINT, err
    assert "KeyboardInterrupt" in err
    for crash in ("Segmentation", "terminate called", "Sanitizer", "Fatal Python error"):
        assert crash not in err, err
    assert exited < 4.0, "the child took %.1f s to exit after SIGINT" % exited


def test_ctrl_c_while_the_dataset_opens_surfaces_within_a_second(tmp_path):
    # feedline.torch opens a Loader at each pass's first batch; over a large bucket the open
    # (its listing) takes minutes. Here the open reads gen's manifest, which takes 3 s.
    ds = gen(tmp_path / "ds", "--format", "files", "--samples", "16", "--sample-size", "1k")
    p = child("""
    import sys, time
    import feedline
    print("ready", flush=True)
    try:
        feedline.Loader(sys.argv[1], batch_size=8, throttle_latency="3s")
    except KeyboardInterrupt:
        print(time.monotonic(), flush=True)
        sys.exit(0)
    sys.exit(1)
    """, ds)
    wait_line(p, "ready")
    time.sleep(0.3)
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, out + err
    latency = float(out.split()[-1]) - sent
    assert latency < PROMPT_S, "KeyboardInterrupt came %.2f s after SIGINT" % latency


def test_report_answers_after_ctrl_c_while_a_pass_opens(tmp_path):
    # The pass's loader is opening (gen's manifest read at 3 s a read) when Ctrl-C comes:
    # report() then answers with the pass interrupted, nothing delivered.
    ds = gen(tmp_path / "ds", "--format", "files", "--samples", "16", "--sample-size", "1k")
    p = child("""
    import json, sys
    import torch
    import feedline.torch
    ds = feedline.torch.IterableDataset(sys.argv[1], batch_size=8, throttle_latency="3s")
    ds.set_epoch(4)
    print("ready", flush=True)
    try:
        for batch in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0):
            pass
    except KeyboardInterrupt:
        print(json.dumps(ds.report()), flush=True)
        sys.exit(0)
    sys.exit(1)
    """, ds)
    wait_line(p, "ready")
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, out + err
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["interrupted"] is True and doc["samples"] == 0 and doc["epoch"] == 4, doc


def shm_entries():
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def held_by_a_process(path):
    """Whether any live process has `path` open or mapped (then it is not left behind)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                if os.readlink("/proc/%s/fd/%s" % (pid, fd)) == path:
                    return True
            with open("/proc/%s/maps" % pid) as f:
                if path in f.read():
                    return True
        except OSError:
            continue
    return False


def test_killed_job_leaves_nothing_behind(files_ds, tmp_path):
    # kill -9 mid-epoch (an OOM kill, a preempted node): no shared-memory segment, lock or
    # temporary file may outlive it, and the next job over the same dataset runs as if the
    # killed one had never been.
    shm_before = shm_entries()
    files_before = set(os.listdir(files_ds))
    p = child("""
    import sys, time
    import torch
    import feedline.torch as ftorch
    ds = ftorch.IterableDataset(sys.argv[1], batch_size=16, io_depth=8)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    for epoch in range(1000):
        ds.set_epoch(epoch)
        for i, batch in enumerate(dl):
            x, lengths = batch.to_torch(".bin")
            if epoch == 1 and i == 3:
                print("running", flush=True)
            time.sleep(0.002)
    """, files_ds, stderr=subprocess.DEVNULL, cwd=str(tmp_path))
    wait_line(p, "running")
    p.kill()
    p.wait(timeout=20)
    assert p.returncode == -signal.SIGKILL
    left = [n for n in shm_entries() - shm_before
            if not held_by_a_process(os.path.join("/dev/shm", n))]
    assert left == [], "/dev/shm entries left by the killed job: %s" % left
    assert set(os.listdir(files_ds)) == files_before, "files left in the dataset directory"
    assert os.listdir(tmp_path) == [], "files left in the job's working directory"
    loader = feedline.Loader(files_ds, batch_size=16)
    keys, digest, _ = run_all(loader)
    assert len(set(keys)) == len(keys) == 400
    assert digest == manifest_digest(files_ds) % M64
    assert loader.report()["delivered"]["verified"] is True
