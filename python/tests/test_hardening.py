"""What a careless or unlucky caller does to the Python package: fork() with a loader alive,
DataLoader worker processes, a transform that never returns or that uses its own loader,
transforms that return large objects, images that decode to gigabytes, keywords of the wrong
type or empty, a metrics port after close(), and names that are not UTF-8.

Each case that could hang or crash runs in a child process (sys.executable, this process's
environment: under ASan it carries the preloaded runtime) with a timeout, so that a regression
fails here instead of hanging the suite.
"""
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import feedline

from support import FEEDLINE, M64, gen, manifest_digest, run_all

# A user's Ctrl-C must end the loop within about a second (the native waits wake every 100 ms);
# the slack is for a loaded 2-core machine and ASan.
PROMPT_S = 1.0


@pytest.fixture(scope="module")
def files_ds(tmp_path_factory):
    return gen(tmp_path_factory.mktemp("files") / "ds", "--format", "files", "--samples", "200",
               "--sample-size", "4k")


def run_child(code, *args, timeout=60, env=None):
    """Runs `code` in a child python3; (returncode, stdout, stderr), or fails the test when the
    child does not end within `timeout` seconds (it is killed, and what it said is shown)."""
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env if env is not None else os.environ)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail("the child hung (killed after %d s)\nstdout:\n%s\nstderr:\n%s"
                    % (timeout, out, err))
    return p.returncode, out, err


# --- fork() ---------------------------------------------------------------------------------


FORK = """
    import gc, os, sys, time, feedline
    l = feedline.Loader(sys.argv[1], batch_size=8, prefetch=4)
    b = next(l)
    first = b.member("")[0].tobytes()
    time.sleep(0.2)  # the pipeline's threads are busy filling the prefetch
    pid = os.fork()
    if pid == 0:
        for name, call in [("next", lambda: next(l)), ("report", l.report)]:
            try:
                call()
                print(name, "worked", flush=True)
            except RuntimeError as e:
                print(name, "refused:", e, flush=True)
        # The parent's batch stays readable: fork() copied its memory.
        print("view", b.member("")[0].tobytes() == first, flush=True)
        if sys.argv[2] == "close":
            l.close()
            print("closed", flush=True)
        elif sys.argv[2] == "collect":
            del l, b
            gc.collect()
            print("collected", flush=True)
        sys.exit(0)  # the interpreter's exit: what is still alive is collected
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status), flush=True)
    # The parent's loader goes on as if nothing happened.
    n = len(b) + sum(len(x) for x in l)
    print("parent", n, flush=True)
"""


@pytest.mark.parametrize("ending", ["close", "collect", "exit"])
def test_a_forked_child_is_refused_the_loader_and_exits_cleanly(files_ds, ending):
    rc, out, err = run_child(FORK, files_ds, ending, timeout=60)
    assert rc == 0, out + err
    lines = out.splitlines()
    for name in ("next", "report"):
        line = next(x for x in lines if x.startswith(name + " "))
        assert "refused" in line and "fork" in line and "new Loader" in line, line
    assert "view True" in lines
    assert "child 0" in lines, out + err
    assert "parent 200" in lines, out + err


# --- DataLoader worker processes ------------------------------------------------------------


DATALOADER_WORKERS = """
    import sys, time, torch
    import feedline.torch as ftorch
    ds = ftorch.IterableDataset(sys.argv[1], batch_size=8)
    kw = dict(num_workers=int(sys.argv[2]))
    if sys.argv[3] != "default":
        kw["multiprocessing_context"] = sys.argv[3]
    t0 = time.monotonic()
    try:
        for b in torch.utils.data.DataLoader(ds, batch_size=None, **kw):
            print("got a batch", flush=True)
            break
    except Exception as e:
        print("refused after %.1f s: %s: %s" % (time.monotonic() - t0, type(e).__name__, e))
"""


@pytest.mark.parametrize("workers,context", [(1, "default"), (2, "default"), (1, "spawn")])
def test_dataloader_worker_processes_are_refused_at_once(files_ds, workers, context):
    pytest.importorskip("torch")
    rc, out, err = run_child(DATALOADER_WORKERS, files_ds, workers, context, timeout=90)
    assert rc == 0, out + err
    assert "got a batch" not in out
    assert "refused" in out and "num_workers=0" in out, out + err


def test_dataloader_without_workers_still_runs(files_ds):
    torch = pytest.importorskip("torch")
    import feedline.torch as ftorch
    ds = ftorch.IterableDataset(files_ds, batch_size=50)
    assert sum(len(b) for b in torch.utils.data.DataLoader(ds, batch_size=None)) == 200
    for bad in (True, -1, 1.0):
        with pytest.raises(ValueError, match="epoch"):
            ds.set_epoch(bad)


# --- transform= and close() -----------------------------------------------------------------


SLOW_TRANSFORM = """
    import sys, threading, time, feedline
    first = threading.Lock()
    def slow(sample):
        if first.acquire(blocking=False):  # the first call says so
            print("in transform", flush=True)
        time.sleep(60)
    l = feedline.Loader(sys.argv[1], batch_size=4, decode_threads=2, transform=slow)
    try:
        with l:
            for b in l:
                pass
    except KeyboardInterrupt:
        print("out", time.monotonic(), flush=True)
    r = l.report()
    print("report", r["interrupted"], flush=True)
    print("exiting", time.monotonic(), flush=True)
"""


def test_ctrl_c_ends_a_loop_whose_transform_never_returns(files_ds):
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SLOW_TRANSFORM), files_ds],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=os.environ)
    try:
        assert p.stdout.readline().strip() == "in transform"
        time.sleep(0.3)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    except (subprocess.TimeoutExpired, AssertionError):
        p.kill()
        out, err = p.communicate()
        pytest.fail("the child did not end after SIGINT:\n%s\n%s" % (out, err))
    gone = time.monotonic()
    assert p.returncode == 0, out + err
    lines = out.splitlines()
    left = float(lines[0].split()[1])
    assert left - sent < PROMPT_S, "the with block ended %.2f s after SIGINT" % (left - sent)
    assert lines[1] == "report True"
    # The process exits at once: the transform still sleeping on a pipeline thread holds
    # nothing up.
    assert gone - sent < 2 * PROMPT_S + 1, "exit %.2f s after SIGINT" % (gone - sent)


def test_close_does_not_wait_for_a_running_or_queued_transform(files_ds):
    code = """
        import sys, threading, time, feedline
        started = threading.Event()
        def slow(sample):
            started.set()
            time.sleep(30)
        l = feedline.Loader(sys.argv[1], batch_size=4, decode_threads=2, transform=slow)
        started.wait(30)
        t0 = time.monotonic()
        l.close()
        print("close took %.2f" % (time.monotonic() - t0), flush=True)
        print("after close", list(l), flush=True)
        r = l.report()
        print("report", r["transform"]["samples"], r["interrupted"], flush=True)
    """
    rc, out, err = run_child(code, files_ds, timeout=60)
    assert rc == 0, out + err
    took = float(out.split("close took ")[1].split()[0])
    assert took < PROMPT_S, out
    assert "after close []" in out
    assert "report 0 True" in out  # the run's figures at close(): no sample transformed


@pytest.mark.parametrize("call", ["close", "next", "report", "with"])
def test_a_transform_that_uses_its_own_loader_gets_a_clear_error(files_ds, call):
    code = """
        import sys, time, feedline
        box = {}
        def fn(sample):
            while "loader" not in box:  # the pipeline starts before Loader() returns
                time.sleep(0.01)
            l = box["loader"]
            if sys.argv[2] == "close":
                l.close()
            elif sys.argv[2] == "next":
                next(l)
            elif sys.argv[2] == "report":
                l.report()
            else:
                with l:
                    pass
            return 1
        box["loader"] = feedline.Loader(sys.argv[1], batch_size=4, transform=fn)
        try:
            for b in box["loader"]:
                pass
            print("no error")
        except RuntimeError as e:
            print("RuntimeError:", e)
    """
    rc, out, err = run_child(code, files_ds, call, timeout=60)
    assert rc == 0, out + err
    assert "RuntimeError:" in out and "its own loader" in out, out + err


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_what_transforms_return_is_inside_the_memory_budget(tmp_path):
    # Each sample is 64 KiB; its transform returns 16 MiB. Without counting them, the samples
    # in flight (reads, decoded, the nine batches of the pool) hold hundreds of MiB of results.
    if "TSAN_OPTIONS" in os.environ:
        # ThreadSanitizer's shadow of every byte written makes resident memory ~3x what the
        # process holds; the budget's own accounting is checked in release and ASan.
        pytest.skip("resident memory under ThreadSanitizer counts its shadow memory")
    ds = gen(tmp_path / "ds", "--format", "files", "--samples", "96", "--sample-size", "64k")
    code = """
        import sys, numpy as np, feedline
        def grow(sample):
            return np.ones(16 << 20, dtype=np.uint8)
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * 4096
        base = rss()
        l = feedline.Loader(sys.argv[1], batch_size=4, memory_budget="128MiB", transform=grow,
                            decode_threads=2, prefetch=6)
        peak, n = 0, 0
        for b in l:
            n += len(b)
            assert all(t.nbytes == 16 << 20 for t in b.transformed)
            peak = max(peak, rss() - base)
            del b
        r = l.report()
        print(n, peak >> 20, r["memory"]["peak_bytes"] >> 20)
    """
    env = dict(os.environ)
    if "ASAN_OPTIONS" in env:
        # ASan keeps freed blocks resident in its quarantine (256 MiB by default): without it the
        # process's resident memory is what it holds, as in a build without ASan.
        env["ASAN_OPTIONS"] += ":quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
    rc, out, err = run_child(code, ds, timeout=120, env=env)
    assert rc == 0, out + err
    n, peak_mib, reported_mib = map(int, out.split())
    assert n == 96
    # The budget (128 MiB), beyond it the batch being filled and the one the loop holds
    # (2 x 4 x 16 MiB at most). Without counting the results: ~480 MiB.
    assert peak_mib < 128 + 128, out
    assert reported_mib >= 64, "the report counts the results in its peak: " + out


# --- decode_image and image_size ------------------------------------------------------------


def small_jpeg():
    Image = pytest.importorskip("PIL.Image")
    b = io.BytesIO()
    Image.fromarray(np.full((32, 48, 3), 90, np.uint8)).save(b, "JPEG", quality=80)
    return b.getvalue()


def jpeg_claiming(width, height):
    """A small JPEG whose frame header says width x height pixels."""
    data = bytearray(small_jpeg())
    i = 2
    while i < len(data):
        marker, length = data[i + 1], int.from_bytes(data[i + 2:i + 4], "big")
        if marker in (0xC0, 0xC2):
            data[i + 5:i + 7] = height.to_bytes(2, "big")
            data[i + 7:i + 9] = width.to_bytes(2, "big")
            return bytes(data)
        i += 2 + length
    raise AssertionError("no frame header")


def jpeg_built():
    v = subprocess.run([FEEDLINE, "--version"], capture_output=True, text=True).stdout
    return "jpeg: yes" in v


@pytest.mark.skipif(not jpeg_built(), reason="built without JPEG")
def test_decode_image_refuses_outputs_beyond_its_pixel_limit():
    data = small_jpeg()
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="image_size.*max_pixels"):
        feedline.decode_image(data, image_size=16384, crop="none")
    assert time.monotonic() - t0 < 1, "refused before decoding"
    # A header that claims 60000 x 60000 pixels (10 GB decoded) at its own size.
    with pytest.raises(feedline.Error, match="max_pixels"):
        feedline.decode_image(jpeg_claiming(60000, 60000))
    with pytest.raises(ValueError, match="max_pixels"):
        feedline.decode_image(data, max_pixels=0)
    # Within the limit, or with it raised, decodes go on as before.
    assert feedline.decode_image(data)[0].shape == (32, 48, 3)
    assert feedline.decode_image(data, image_size=64, crop="none",
                                 max_pixels=64 * 64)[0].shape == (64, 64, 3)
    with pytest.raises(ValueError, match="max_pixels"):
        feedline.decode_image(data, image_size=64, crop="none", max_pixels=64 * 64 - 1)
    for bad in (-1, 2 ** 40, 2.5, True, "224"):
        with pytest.raises((ValueError, TypeError), match="image_size"):
            feedline.decode_image(data, image_size=bad)


@pytest.mark.skipif(not jpeg_built(), reason="built without JPEG")
def test_loader_image_size_has_the_same_limit(files_ds):
    with pytest.raises(ValueError, match="image_size"):
        feedline.Loader(files_ds, image_size=16384, crop="none")


# --- keywords -------------------------------------------------------------------------------


@pytest.mark.parametrize("key,value,error,words", [
    ("batch_size", False, TypeError, "batch_size"),
    ("batch_size", True, TypeError, "batch_size"),
    ("batch_size", np.bool_(True), TypeError, "batch_size"),  # operator.index takes it as 1
    ("io_depth", False, TypeError, "io_depth"),
    ("batch_size", 2.0, TypeError, "batch_size"),
    ("seed", 1.5, TypeError, "seed"),
    ("batch_size", -1, ValueError, "batch_size"),
    ("seed", 2 ** 70, ValueError, "seed"),
    ("batch_size", "3", TypeError, "batch_size"),
    ("batch_size", b"3", TypeError, "batch_size"),
    ("memory_budget", b"1GiB", TypeError, "memory_budget"),
    ("direct", 2, TypeError, "direct"),
    ("direct", "yes", TypeError, "direct"),
    ("shuffle", 2, TypeError, "shuffle"),
    ("format", os.path, TypeError, "format"),
])
def test_keyword_values_of_the_wrong_type(files_ds, key, value, error, words):
    with pytest.raises(error, match=words) as info:
        feedline.Loader(files_ds, **{key: value})
    assert "--" not in str(info.value), str(info.value)


def test_a_path_is_only_for_path_keywords(files_ds, tmp_path):
    import pathlib
    with pytest.raises(TypeError, match="batch_size"):
        feedline.Loader(files_ds, batch_size=pathlib.Path("3"))
    feedline.Loader(pathlib.Path(files_ds), batch_size=50).close()


def test_flag_keywords_take_0_and_1(files_ds):
    for v in (0, 1, False, True, np.bool_(False), np.bool_(True)):
        keys, _, _ = run_all(feedline.Loader(files_ds, batch_size=50, drop_last=v, shuffle=v))
        assert len(keys) == 200


def test_numbers_as_text_and_sizes_as_ints(files_ds):
    keys, _, _ = run_all(feedline.Loader(files_ds, batch_size=50, memory_budget=256 << 20))
    assert len(keys) == 200
    l = feedline.Loader(files_ds, batch_size=50, memory_budget="256MiB")
    assert l.report()["config"]["memory_budget"] == 256 << 20
    l.close()


STRING_KEYWORDS = ["format", "memory_budget", "max_sample_size", "decode_cost", "collate_cost",
                   "on_error", "engine", "device", "gpu_direct", "throttle_bw",
                   "throttle_latency", "throttle_seek", "crop", "endpoint", "region", "profile",
                   "part_size", "connect_timeout", "stall_timeout", "ca_bundle", "metrics_bind"]


@pytest.mark.parametrize("key", STRING_KEYWORDS)
def test_an_empty_string_is_refused_naming_the_keyword(files_ds, key):
    with pytest.raises(ValueError, match=r"\b%s\b.*empty|empty.*\b%s\b" % (key, key)) as info:
        feedline.Loader(files_ds, **{key: ""})
    assert "--" not in str(info.value), str(info.value)


def test_ca_bundle_must_be_a_readable_file(files_ds, tmp_path):
    with pytest.raises(ValueError, match="ca_bundle.*no-such.pem"):
        feedline.Loader(files_ds, ca_bundle=str(tmp_path / "no-such.pem"))
    with pytest.raises(ValueError, match="ca_bundle.*directory"):
        feedline.Loader(files_ds, ca_bundle=str(tmp_path))
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    feedline.Loader(files_ds, ca_bundle=pem, batch_size=50).close()


# --- metrics_port= --------------------------------------------------------------------------


def test_close_stops_the_metrics_endpoint(files_ds):
    l = feedline.Loader(files_ds, batch_size=50, metrics_port=0)
    url = l.metrics_url
    assert b"feedline_samples_total" in urllib.request.urlopen(url, timeout=5).read()
    next(l)
    l.close()
    assert l.metrics_url is None
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)
    assert l.report()["batches"] >= 1  # the loader object lives on; its report stays


# --- names that are not UTF-8 ---------------------------------------------------------------


def test_names_that_are_not_utf8(tmp_path):
    # Linux names are bytes: keys come back as os.fsdecode() makes them (surrogateescape), so
    # that os.fsencode() gives the name back; report(), state_dict() and the exit work.
    root = os.fsencode(tmp_path) + b"/d\xe9j\xe0"  # Latin-1 "dejà": not UTF-8
    os.mkdir(root)
    names = [b"caf\xe9-%d.bin" % i for i in range(5)] + [b"ok-%d.bin" % i for i in range(5)]
    for i, n in enumerate(names):
        with open(root + b"/" + n, "wb") as f:
            f.write(bytes([i]) * 1000)
    code = """
        import json, os, sys, feedline
        root = os.fsdecode(sys.argv[1].encode("utf-8", "surrogateescape"))
        seen = []
        l = feedline.Loader(root, batch_size=3, shuffle=False,
                            transform=lambda s: (s["__key__"], sorted(s)))
        for b in l:
            seen += b.keys
            for k, (key, members) in zip(b.keys, b.transformed):
                assert key == k and members == [".bin", "__key__"], (key, members)
            b.member(".bin")
        print(json.dumps([os.fsencode(k).hex() for k in seen]))
        state = l.state_dict()
        json.dumps(state)
        r = l.report()
        json.dumps(r)
        print("samples", r["samples"])
        again = feedline.Loader(os.fsencode(root), batch_size=3, shuffle=False)
        print("bytes url", sum(len(b) for b in again))
        try:
            feedline.Loader(os.fsencode(root) + b"/no-such-\\xff")
        except feedline.Error as e:
            print("missing", str(e).encode("ascii", "backslashreplace").decode())
    """
    rc, out, err = run_child(code, os.fsdecode(root), timeout=60)
    assert rc == 0, out + err
    lines = out.splitlines()
    got = sorted(bytes.fromhex(h) for h in json.loads(lines[0]))
    assert got == sorted(n[:-4] for n in names)
    assert "samples 10" in lines and "bytes url 10" in lines
    # The error names the path, the bytes that are not UTF-8 shown as \xNN.
    assert any(x.startswith("missing") and "no-such-\\xff" in x for x in lines), out


# --- the exit ---------------------------------------------------------------------------------


def test_the_exit_is_clean_with_a_loader_left_open(files_ds):
    # A loader left open at exit whose transform failed, its threads waiting for the GIL: the
    # interpreter's finalization used to end them mid-call (SIGSEGV, SIGABRT).
    code = """
        import sys, time, feedline
        box = {}
        def fn(sample):
            while "loader" not in box:
                time.sleep(0.01)
            raise RuntimeError("not this one")
        box["loader"] = feedline.Loader(sys.argv[1], batch_size=4, transform=fn)
        try:
            for b in box["loader"]:
                pass
        except RuntimeError as e:
            print("raised", e)
    """
    for _ in range(3):
        rc, out, err = run_child(code, files_ds, timeout=60)
        assert rc == 0 and "raised not this one" in out, out + err
