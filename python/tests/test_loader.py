"""The Python binding end to end: real datasets written by `feedline gen`, real numpy and torch.

Run by ctest (python.pytest) with FEEDLINE_BIN naming the CLI and PYTHONPATH the build's
python/ folder; by hand: PYTHONPATH=build/release/python FEEDLINE_BIN=build/release/tools/feedline
/usr/bin/python3 -m pytest python/tests
"""
import errno
import itertools
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import feedline

from support import FEEDLINE, M64, gen, manifest_digest, run_all


@pytest.fixture(scope="module")
def files_ds(tmp_path_factory):
    return gen(tmp_path_factory.mktemp("files") / "ds", "--format", "files", "--samples", "600",
               "--sample-size", "4k")


@pytest.fixture(scope="module")
def tar_ds(tmp_path_factory):
    args = ["--format", "tar", "--samples", "500", "--sample-size", "8k",
            "--samples-per-shard", "125"]
    return gen(tmp_path_factory.mktemp("tar") / "ds", *args)


def test_digest_equals_gen(files_ds):
    loader = feedline.Loader(files_ds, batch_size=64, epochs=2, seed=3)
    keys, digest, batches = run_all(loader)
    assert len(keys) == 1200 and len(set(keys)) == 600
    assert digest == manifest_digest(files_ds) * 2 % M64
    report = loader.report()
    assert report["delivered"]["digest"] == digest
    assert report["delivered"]["verified"] is True
    assert report["samples"] == 1200
    assert batches == 2 * 10


def test_member_views_match_padded_and_keep_the_batch(tar_ds):
    loader = feedline.Loader(tar_ds, batch_size=50, shuffle=False)
    b = next(loader)
    views = b.member(".bin")
    assert len(views) == len(b) == 50
    assert all(v.dtype == np.uint8 and not v.flags.writeable for v in views)
    data, lengths = b.padded(".bin")
    for i, v in enumerate(views):
        assert lengths[i] == len(v)
        assert np.array_equal(data[i, : len(v)], v)
        assert not data[i, len(v):].any()
    copies = [v.copy() for v in views]
    keep = views[7]
    del b, views
    loader.close()
    del loader
    assert np.array_equal(keep, copies[7])  # the view kept its batch's buffer alive


def test_missing_member_is_a_key_error(tar_ds):
    loader = feedline.Loader(tar_ds, batch_size=10)
    b = next(loader)
    with pytest.raises(KeyError, match="no member ending in '.jpg'"):
        b.member(".jpg")
    loader.close()


@pytest.mark.parametrize("world", [2, 3])
def test_every_sample_once_across_ranks(files_ds, world):
    per_rank, counts, digest = [], set(), 0
    for rank in range(world):
        keys, d, batches = run_all(feedline.Loader(files_ds, batch_size=32, rank=rank,
                                                   world_size=world, seed=1))
        per_rank.append(set(keys))
        counts.add(batches)
        digest = (digest + d) % M64
    assert len(counts) == 1, "every rank gets the same number of batches"
    allkeys = set().union(*per_rank)
    assert sum(len(k) for k in per_rank) == len(allkeys) == 600
    assert digest == manifest_digest(files_ds)


@pytest.mark.parametrize("launcher", [("RANK", "WORLD_SIZE"),
                                      ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                                      ("SLURM_PROCID", "SLURM_NTASKS")])
def test_rank_and_world_from_the_launchers_variables(files_ds, monkeypatch, launcher):
    # As `feedline run` reads them (torchrun, Open MPI's mpirun, SLURM's srun): the ranks that
    # the variables make deliver every sample once between them.
    for name in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    rank_var, world_var = launcher
    digest, keys = 0, set()
    for rank in range(2):
        monkeypatch.setenv(rank_var, str(rank))
        monkeypatch.setenv(world_var, "2")
        loader = feedline.Loader(files_ds, batch_size=30, seed=2)
        k, d, _ = run_all(loader)
        config = loader.report()["config"]
        assert (config["rank"], config["world_size"]) == (rank, 2)
        keys |= set(k)
        digest = (digest + d) % M64
    assert len(keys) == 600 and digest == manifest_digest(files_ds)
    # Half a launcher's pair is an error naming the variable that is missing.
    monkeypatch.delenv(world_var)
    with pytest.raises(ValueError, match=world_var):
        feedline.Loader(files_ds)


def test_ranks_get_equal_batches_where_striding_would_not(files_ds):
    # 600 samples over 7 ranks, batch 85: 86 samples (2 batches) for 5 ranks, 85 (1) for 2.
    # The rule: every rank 85 samples, one batch; the last 600 % 7 = 5 go to none this epoch.
    seen, counts = set(), set()
    for rank in range(7):
        loader = feedline.Loader(files_ds, batch_size=85, rank=rank, world_size=7)
        keys, _, batches = run_all(loader)
        assert len(keys) == 85
        assert not seen & set(keys)
        seen |= set(keys)
        counts.add(batches)
        assert loader.report()["left_out_per_epoch"] == 5  # the report says how many
    assert counts == {1}
    # Where the shares make as many batches (batch 100: 86 and 85 samples, one batch each
    # either way), every sample goes to one rank, and none is left out.
    loader = feedline.Loader(files_ds, batch_size=100, rank=0, world_size=7)
    assert len(run_all(loader)[0]) == 86 and loader.report()["left_out_per_epoch"] == 0


def test_resume_mid_epoch_exactly(files_ds):
    opts = dict(batch_size=32, epochs=2, seed=9)
    full_keys, full_digest, _ = run_all(feedline.Loader(files_ds, **opts))
    first = feedline.Loader(files_ds, **opts)
    keys, digest = [], 0
    for _ in range(25):  # into the second epoch (19 batches each)
        b = next(first)
        keys += b.keys
        digest = (digest + b.digest) % M64
    state = first.state_dict()
    first.close()
    state = pickle.loads(pickle.dumps(json.loads(json.dumps(state))))  # plain data
    assert state["epoch"] == 1 and state["progress"] == [{"world_size": 1, "batches": 6}]
    rest_keys, rest_digest, _ = run_all(feedline.Loader(files_ds, state=state, **opts))
    assert keys + rest_keys == full_keys
    assert (digest + rest_digest) % M64 == full_digest


@pytest.mark.parametrize("before,after", [(3, 2), (2, 3), (2, 2)])
def test_resume_on_another_number_of_ranks(files_ds, before, after):
    # An elastic job: `before` ranks step together for 5 batches, the checkpoint (rank 0's state,
    # as a DDP job saves it) resumes on `after` ranks. 600 samples, batch 16: no split leaves any
    # sample out, so the epoch is every sample once.
    opts = dict(batch_size=16, seed=4)
    keys, digest, state = [], 0, None
    for rank in range(before):
        loader = feedline.Loader(files_ds, rank=rank, world_size=before, **opts)
        for _ in range(5):
            b = next(loader)
            keys += b.keys
            digest = (digest + b.digest) % M64
        s = loader.state_dict()
        loader.close()
        state = state or s
        assert {k: v for k, v in s.items() if k != "rank"} == \
            {k: v for k, v in state.items() if k != "rank"}, "every rank saves the same point"
    counts = set()
    for rank in range(after):
        k, d, batches = run_all(feedline.Loader(files_ds, rank=rank, world_size=after,
                                                state=json.dumps(state), **opts))
        keys += k
        digest = (digest + d) % M64
        counts.add(batches)
    assert len(counts) == 1, "every new rank gets the same number of batches"
    assert len(keys) == len(set(keys)) == 600
    assert digest == manifest_digest(files_ds)


def test_resume_refuses_other_settings(files_ds):
    l = feedline.Loader(files_ds, batch_size=32)
    next(l)
    state = l.state_dict()
    l.close()
    with pytest.raises(ValueError, match="batch_size=32"):
        feedline.Loader(files_ds, batch_size=16, state=state)
    with pytest.raises(ValueError, match="not a feedline loader state"):
        feedline.Loader(files_ds, state={"hello": 1})


def test_bad_arguments(files_ds):
    with pytest.raises(ValueError, match="batch_size"):
        feedline.Loader(files_ds, batch_size=0)
    with pytest.raises(ValueError, match="memory_budget"):
        feedline.Loader(files_ds, memory_budget="lots")
    with pytest.raises(ValueError, match="on_error"):
        feedline.Loader(files_ds, on_error="ignore")
    with pytest.raises(TypeError, match="batchsize"):
        feedline.Loader(files_ds, batchsize=4)
    with pytest.raises(TypeError, match="shuffle"):
        feedline.Loader(files_ds, shuffle="yes")
    with pytest.raises(TypeError):
        feedline.Loader(files_ds, io_depth=[1])
    with pytest.raises(TypeError, match="url"):
        feedline.Loader(42)
    # The CLI's emulated accelerators are not an embedded loader's: one Loader feeds one consumer.
    with pytest.raises(TypeError, match="accelerators"):
        feedline.Loader(files_ds, accelerators=2)
    with pytest.raises(TypeError, match="runs"):
        feedline.Loader(files_ds, runs=3)


def test_missing_dataset_is_a_feedline_error(tmp_path):
    with pytest.raises(feedline.Error) as e:
        feedline.Loader(str(tmp_path / "nothing"))
    assert isinstance(e.value, OSError)
    assert str(tmp_path / "nothing") in str(e.value)


def test_corrupt_sample_names_the_object(tmp_path):
    ds = gen(tmp_path / "ds", "--format", "tar", "--samples", "40", "--sample-size", "4k",
             "--compress", "zstd", "--compressibility", "0.5")
    shard = sorted(f for f in os.listdir(ds) if f.endswith(".tar"))[0]
    path = os.path.join(ds, shard)
    with open(path, "r+b") as f:  # scramble the first member's zstd frame
        f.seek(512 + 4)
        f.write(b"\xff" * 64)
    with pytest.raises(feedline.Error, match=shard):
        run_all(feedline.Loader(ds, batch_size=8, index=False))
    keys, _, _ = run_all(feedline.Loader(ds, batch_size=8, on_error="skip", index=False))
    assert len(keys) < 40


def test_report_after_close_midway(files_ds):
    l = feedline.Loader(files_ds, batch_size=16)
    next(l)
    l.close()
    r = l.report()
    assert r["batches"] >= 1 and r["snapshot"] is False
    assert list(l) == []


def test_threads_iterate_report_and_close_one_loader_safely(files_ds):
    # One thread iterates (waiting 50 ms a read), another takes reports as it goes and then
    # closes the loader under it: the iterating thread ends (closed, or the end of the run),
    # nothing crashes, and the final report is the same for both.
    import threading
    l = feedline.Loader(files_ds, batch_size=8, io_depth=2, throttle_latency="50ms")
    seen, errors = [], []

    def iterate():
        try:
            for b in l:
                seen.append(len(b))
        except ValueError as e:  # closed while it waited
            errors.append(str(e))

    t = threading.Thread(target=iterate)
    t.start()
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        r = l.report()  # a snapshot from this thread while the other waits in next()
        assert r["snapshot"] is True
        time.sleep(0.02)
    assert seen, "no batch within 10 s"
    l.close()
    t.join(timeout=10)
    assert not t.is_alive()
    assert all("closed" in e for e in errors)
    final = l.report()
    assert final["snapshot"] is False and final["batches"] >= len(seen)
    assert l.report() == final


def test_holding_every_batch_buffer_raises_instead_of_hanging(files_ds):
    # list(loader) keeps every batch: once they hold the whole pool (prefetch 2 + 2 buffers),
    # nothing can make the next one. The loop is told so, and goes on once batches are dropped.
    l = feedline.Loader(files_ds, batch_size=16, prefetch=2)
    kept = []
    with pytest.raises(feedline.Error, match="batch buffers is in a batch still alive") as info:
        for b in l:
            kept.append(b)
    assert info.value.errno == errno.ENOBUFS
    assert "raise prefetch for a larger pool" in str(info.value), str(info.value)  # a keyword
    assert 2 <= len(kept) <= 8
    n = len(kept) * 16
    kept.clear()
    n += sum(len(b) for b in l)
    assert n == 600


def test_ctrl_c_interrupts_within_a_second(files_ds):
    # A storage that answers each read after 5 s: the loop waits for its first batch when
    # SIGINT comes; KeyboardInterrupt must arrive within a second, and the report still works.
    code = textwrap.dedent("""
        import sys, time, feedline
        l = feedline.Loader(sys.argv[1], batch_size=8, throttle_latency="5s", io_depth=2)
        print("ready", flush=True)
        t0 = None
        try:
            for b in l:
                pass
        except KeyboardInterrupt:
            t0 = time.monotonic()
            r = l.report()
            print("interrupted", r["interrupted"], flush=True)
            print("after", time.monotonic() - t0, flush=True)
            sys.exit(0)
        print("not interrupted", flush=True)
        sys.exit(1)
    """)
    p = subprocess.Popen([sys.executable, "-c", code, files_ds], stdout=subprocess.PIPE,
                         text=True, env=os.environ)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=10)
    elapsed = time.monotonic() - sent
    assert p.returncode == 0, out
    assert "interrupted True" in out
    assert elapsed < 3.0, "KeyboardInterrupt and report took %.1f s" % elapsed


def test_torch_batches_and_dataloader(files_ds):
    torch = pytest.importorskip("torch")
    import feedline.torch as ftorch
    ds = ftorch.IterableDataset(files_ds, batch_size=100, seed=5)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    orders = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        keys = []
        for batch in dl:
            t, lengths = batch.to_torch(".bin")
            assert t.dtype == torch.uint8 and t.shape == (len(batch), 4096)
            assert lengths.tolist() == [4096] * len(batch)
            keys += batch.keys
        assert sorted(keys) == sorted(set(keys)) and len(keys) == 600
        orders.append(keys)
    assert orders[0] != orders[1], "set_epoch reshuffles"
    # set_epoch(1) again gives epoch 1's order again (seeded by seed and epoch)
    ds.set_epoch(1)
    assert [k for b in dl for k in b.keys] == orders[1]


@pytest.mark.parametrize("batch_size,drop_last,world_size", [
    (64, False, 1), (64, True, 1), (100, False, 1), (7, False, 2), (7, True, 2), (64, False, 7)])
def test_len_is_the_batches_each_epoch_delivers(files_ds, batch_size, drop_last, world_size):
    """len(loader): what each rank's epoch delivers (600 samples: the equal-batches rule over
    the ranks, the last batch short unless drop_last), before, during and after the pass."""
    for rank in range(world_size):
        loader = feedline.Loader(files_ds, batch_size=batch_size, drop_last=drop_last,
                                 rank=rank, world_size=world_size, epochs=2)
        n = len(loader)
        got = [len(b) for b in loader]
        assert len(got) == 2 * n, (n, got)
        assert len(loader) == n  # after the run (and after close()) too
        loader.close()
        assert len(loader) == n
        per_rank = 600 // world_size  # every rank delivers as many batches
        want = per_rank // batch_size if drop_last else -(-per_rank // batch_size)
        assert n == want, (n, want, rank)


def test_torch_len_is_the_passs_batches_and_opens_the_dataset_once(files_ds):
    torch = pytest.importorskip("torch")
    import feedline.torch as ftorch
    ds = ftorch.IterableDataset(files_ds, batch_size=64, seed=3)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    assert len(ds) == len(dl) == 10  # 600 samples: 9 of 64 and one of 24
    opened = ds._next[0]
    ds.set_epoch(0)  # the same pass: the loader len() opened is the one the pass uses
    keys = [k for b in dl for k in b.keys]
    assert ds._loader is opened and len(keys) == 600
    ds.set_epoch(1)
    assert len(ds) == 10 and sum(1 for _ in dl) == 10
    # set_epoch after len(): the early loader was for another epoch, and is not used
    ds2 = ftorch.IterableDataset(files_ds, batch_size=64, seed=3)
    assert len(ds2) == 10
    early = ds2._next[0]
    ds2.set_epoch(1)
    ds.set_epoch(1)  # epoch 1 again, on purpose
    assert [k for b in ds2 for k in b.keys] == [k for b in dl for k in b.keys]
    assert ds2._loader is not early


def test_torch_set_epoch_forgotten_warns_once(files_ds):
    pytest.importorskip("torch")
    import warnings
    import feedline.torch as ftorch
    ds = ftorch.IterableDataset(files_ds, batch_size=200, seed=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        orders = [[k for b in ds for k in b.keys] for _ in range(3)]  # no set_epoch()
    assert orders[0] == orders[1] == orders[2]
    said = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1, [str(w.message) for w in caught]
    assert "set_epoch" in str(said[0].message) and "epoch 0 again" in str(said[0].message)
    assert said[0].filename == __file__  # at the user's loop, not in feedline
    # set_epoch() each pass, or a deliberate set_epoch() to the same epoch: no warning
    ds = ftorch.IterableDataset(files_ds, batch_size=200, seed=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in (0, 1, 1):
            ds.set_epoch(epoch)
            sum(1 for _ in ds)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.mark.parametrize("batch_size", [1, 8])
def test_torch_dataloader_batch_size_refused_with_what_to_write(files_ds, batch_size):
    torch = pytest.importorskip("torch")
    import feedline.torch as ftorch
    ds = ftorch.IterableDataset(files_ds, batch_size=100)
    args = {} if batch_size == 1 else {"batch_size": batch_size}  # 1: DataLoader's default
    dl = torch.utils.data.DataLoader(ds, num_workers=0, **args)
    with pytest.raises(TypeError, match=r"DataLoader\(batch_size=%d\).*batch_size=None" % batch_size):
        next(iter(dl))
    assert ds._loader is None and ds._next is None  # refused before the dataset was opened
    # Collated by another path (a DataLoader this torch's frames do not show): the same words.
    from torch.utils.data._utils.collate import default_collate
    with pytest.raises(TypeError, match=r"DataLoader\(batch_size=2\)"):
        default_collate(list(itertools.islice(feedline.Loader(files_ds, batch_size=10), 2)))


def test_torch_pin_memory_refused_with_what_to_write(files_ds):
    torch = pytest.importorskip("torch")
    import feedline.torch  # noqa: F401  (it teaches Batch what pinning says)
    from torch.utils.data._utils.pin_memory import pin_memory
    batch = next(iter(feedline.Loader(files_ds, batch_size=10)))
    # What DataLoader(pin_memory=True)'s pin thread does with each batch where CUDA is available
    # (without CUDA it pins nothing).
    with pytest.raises(TypeError, match=r"pin_memory=False.*device='cuda:0'"):
        pin_memory(batch)


def test_torch_resume_mid_epoch(files_ds):
    pytest.importorskip("torch")
    import feedline.torch as ftorch
    ds = ftorch.IterableDataset(files_ds, batch_size=50, seed=2)
    ds.set_epoch(3)
    full = [k for b in ds for k in b.keys]
    ds.set_epoch(3)  # the same epoch again, on purpose
    it = iter(ds)
    part = [k for _ in range(4) for k in next(it).keys]
    state = ds.state_dict()
    it.close()
    ds2 = ftorch.IterableDataset(files_ds, batch_size=50, seed=2)
    ds2.load_state_dict(state)
    rest = [k for b in ds2 for k in b.keys]
    assert part + rest == full


def test_transform_runs_per_sample_and_its_results_ride_in_the_batch(files_ds):
    def fn(sample):
        assert sorted(sample) == [".bin", "__key__"], sorted(sample)
        return sample["__key__"], ".bin", sample[".bin"][::-1]
    loader = feedline.Loader(files_ds, batch_size=64, transform=fn)
    samples = 0
    for b in loader:
        out = b.transformed
        assert len(out) == len(b)
        for key, view, (tkey, name, reversed_bytes) in zip(b.keys, b.member(""), out):
            assert tkey == key
            assert reversed_bytes == view.tobytes()[::-1]
        samples += len(b)
    assert samples == 600
    r = loader.report()
    assert r["delivered"]["verified"] is True
    t = r["transform"]
    assert t["samples"] == 600 and t["errors"] == 0
    assert t["seconds"] > 0 and 0 <= t["lock_wait_seconds"] <= t["off_cpu_seconds"] <= t["seconds"]
    assert 0 < t["cpu_seconds"] <= t["seconds"]
    assert 0 < t["decode_share"] <= 1 and 0 <= t["off_cpu_share"] <= 1
    assert feedline.Loader(files_ds).report()["transform"] is None


class Unreadable(Exception):
    pass


def test_a_transform_that_raises_fails_with_its_exception_or_is_skipped(files_ds):
    victim = sorted(feedline.Loader(files_ds, batch_size=600, shuffle=False).__next__().keys)[7]

    def fn(sample):
        if sample["__key__"] == victim:
            raise Unreadable("cannot parse " + victim)
        return 1
    loader = feedline.Loader(files_ds, batch_size=32, transform=fn)
    with pytest.raises(Unreadable, match="cannot parse") as info:
        for _ in loader:
            pass
    notes = getattr(info.value, "__notes__", [])
    assert any(victim in n and "transform" in n for n in notes), notes
    skip = feedline.Loader(files_ds, batch_size=32, transform=fn, on_error="skip")
    keys = [k for b in skip for k in b.keys]
    assert victim not in keys and len(keys) == 599
    r = skip.report()
    assert r["skipped"]["samples"] == 1 and r["transform"]["errors"] == 1
    with pytest.raises(TypeError, match="transform must be callable"):
        feedline.Loader(files_ds, transform=3)


def test_a_gil_bound_transform_is_named_in_the_verdict(files_ds):
    def busy(sample):  # pure Python: holds the GIL throughout
        x = 0
        for i in range(60000):
            x += i
        return x
    # Three decode threads queue for one GIL: each spends about two thirds of its calls off
    # the CPU.
    loader = feedline.Loader(files_ds, batch_size=16, decode_threads=3, transform=busy)
    for _ in loader:
        pass
    r = loader.report()
    assert r["transform"]["off_cpu_share"] > 0.3, r["transform"]
    assert r["bottleneck"]["stage"] == "decode", r["bottleneck"]
    assert "GIL" in r["bottleneck"]["suggestion"], r["bottleneck"]
    # what works with feedline: never worker processes, which it refuses (num_workers=0)
    assert "process" not in r["bottleneck"]["suggestion"], r["bottleneck"]


def test_the_report_names_settings_not_flags(files_ds):
    """The library's report, versioned: the verdict's knobs are settings with numbers, and the
    suggestion says decode_threads=1 -> 2, not the CLI's --decode-threads."""
    loader = feedline.Loader(files_ds, batch_size=16, decode_threads=1, decode_cost="2ms")
    for _ in loader:
        pass
    r = loader.report()
    assert r["schema"] == 1
    b = r["bottleneck"]
    assert b["stage"] == "decode", b
    assert "--" not in b["suggestion"], b
    for k in b["next"]:
        assert set(k) == {"knob", "from", "to"}, k
        assert type(k["from"]) is int and type(k["to"]) is int, k
    if b["next"]:  # a core left for decode (os.cpu_count() > 1)
        k = b["next"][0]
        assert b["suggestion"].startswith("%s=%d -> %d" % (k["knob"], k["from"], k["to"])), b


def test_report_mid_run_is_a_snapshot_and_the_run_goes_on(files_ds):
    loader = feedline.Loader(files_ds, batch_size=50, seed=5)
    keys = []
    for _ in range(4):
        keys += next(loader).keys
    mid = loader.report()
    assert mid["snapshot"] is True and mid["interrupted"] is False
    assert mid["samples"] == 200 and mid["batches"] == 4
    assert mid["bottleneck"]["stage"] == "none" and "mid-run" in mid["bottleneck"]["evidence"]
    names = {s["name"] for s in mid["stages"]}
    assert {"storage", "decode", "collate", "consumer"} <= names
    for s in mid["stages"]:
        total = s["busy_fraction"] + s["starved_fraction"] + s["blocked_fraction"]
        assert abs(total - 1) < 0.02, s
    keys += [k for b in loader for k in b.keys]
    assert len(keys) == len(set(keys)) == 600
    end = loader.report()
    assert end["snapshot"] is False and end["delivered"]["verified"] is True
    assert end["bottleneck"]["stage"] != "none"


def test_member_finds_a_zstd_member_by_its_decoded_name(tmp_path):
    ds = gen(tmp_path / "zst", "--format", "tar", "--samples", "40", "--sample-size", "4k",
             "--samples-per-shard", "20", "--compress", "zstd")
    names = []
    loader = feedline.Loader(ds, batch_size=8, transform=lambda s: sorted(s))
    for b in loader:
        assert len(b.member(".bin")) == len(b)  # stored as .bin.zst
        names += b.transformed
    assert names and all(n == [".bin", ".cls", "__key__"] for n in names), names[:3]
    assert loader.report()["delivered"]["verified"] is True


def test_dlpack_and_to_torch_without_a_copy_where_sizes_allow(files_ds, tar_ds):
    torch = pytest.importorskip("torch")
    loader = feedline.Loader(files_ds, batch_size=32)
    b = next(loader)
    views = b.member("")
    t, lengths = b.to_torch()
    assert t.shape == (32, 4096) and lengths.tolist() == [4096] * 32
    assert t.data_ptr() == views[0].ctypes.data, "a view of the batch's buffer, not a copy"
    whole = torch.from_dlpack(b)
    assert b.__dlpack_device__() == (1, 0)  # kDLCPU
    copies = [v.tobytes() for v in views]
    del b, views
    loader.close()  # the tensors keep their batch's buffer alive
    for i, c in enumerate(copies):
        assert t[i].numpy().tobytes() == c and whole[i].numpy().tobytes() == c
    # Members of differing sizes are padded (one copy); the rows match the views either way.
    for b in feedline.Loader(tar_ds, batch_size=50):
        for suffix in (".bin", ".cls"):
            t, lengths = b.to_torch(suffix)
            for row, n, v in zip(t, lengths.tolist(), b.member(suffix)):
                assert n == len(v) and row[:n].numpy().tobytes() == v.tobytes()
                assert not row[n:].any()


def test_the_pipelines_errors_name_keywords(files_ds):
    """A batch too large for the memory budget: the library's hint names the keywords to change,
    as the Python caller gave them (memory_budget, batch_size), never the CLI's flags."""
    with pytest.raises((ValueError, feedline.Error)) as e:
        feedline.Loader(files_ds, batch_size=600, memory_budget="1MiB")
    text = str(e.value)
    assert "memory_budget" in text and "batch_size" in text, text
    assert "--" not in text and "{" not in text, text


def test_device_gives_gpu_batches_or_a_clear_error(files_ds):
    # With a GPU: batches copied to it (the H2D copy its own stage), to_torch() on the device.
    # Without one (this project's CI): a feedline.Error that says so and names the keyword.
    try:
        loader = feedline.Loader(files_ds, batch_size=32, device="cuda:0")
    except feedline.Error as e:
        assert "GPU" in str(e) and "device" in str(e) and "--" not in str(e), str(e)
        return
    torch = pytest.importorskip("torch")
    b = next(loader)
    t, _ = b.to_torch()
    assert t.is_cuda
    assert loader.report()["device"] is not None


def test_the_example_training_loop_runs_and_resumes(tmp_path):
    pytest.importorskip("torch")
    ds = gen(tmp_path / "ds", "--format", "tar", "--samples", "1200", "--sample-size", "4k",
             "--samples-per-shard", "300")
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "train.py")
    ckpt = tmp_path / "ckpt.json"
    run = [sys.executable, example, ds, "--epochs", "2", "--batch-size", "64",
           "--checkpoint", str(ckpt)]
    out = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("bottleneck:") == 2 and "transform:" in out.stdout, out.stdout
    assert json.loads(ckpt.read_text()) == {"epoch": 2, "loader": None}  # both passes done
    again = subprocess.run(run[:4] + ["3"] + run[5:], capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0, again.stderr
    assert "resuming from" in again.stdout and again.stdout.count("bottleneck:") == 1
    assert "epoch 2:" in again.stdout, again.stdout


def test_mlperf_formats_select_members_by_name(tmp_path):
    """npz members are the arrays' bytes, named <key>.<array>; a TFRecord record's one member ends
    in .tfrecord; an npy file's one member is its array: each selected as numpy reads it."""
    npy = gen(tmp_path / "npy", "--format", "npy", "--samples", "5", "--sample-size", "2k")
    b = next(feedline.Loader(npy, batch_size=5, shuffle=False))
    for key, a in zip(b.keys, b.member("")):
        assert np.array_equal(a, np.load(os.path.join(npy, key + ".npy")))
    version = subprocess.run([FEEDLINE, "--version"], capture_output=True, text=True).stdout
    if "isal: yes" not in version:
        pytest.skip("npz and TFRecord: this feedline was built without ISA-L")
    npz = gen(tmp_path / "npz", "--format", "npz", "--samples", "12", "--sample-size", "3k")
    b = next(feedline.Loader(npz, batch_size=12, shuffle=False))
    xs, ys = b.member(".x"), b.member(".y")
    for key, x, y in zip(b.keys, xs, ys):
        with np.load(os.path.join(npz, key + ".npz")) as z:
            assert np.array_equal(x, z["x"])
            assert y.view("<i8")[0] == z["y"]
    tf = gen(tmp_path / "tf", "--format", "tfrecord", "--samples", "9", "--sample-size", "1k",
             "--samples-per-file", "4")
    b = next(feedline.Loader(tf, batch_size=9, shuffle=False))
    assert b.keys[5] == "shard-000001/000001"
    assert [len(v) for v in b.member(".tfrecord")] == [1024] * 9


def test_labels_are_the_cls_members_as_numbers(tmp_path):
    """gen --classes 7: each sample's .cls is its class in 0..6; Batch.labels() gives them as an
    int64 array (and torch tensor), which to_torch(".cls") would give as ASCII codes."""
    ds = gen(tmp_path / "ds", "--format", "tar", "--samples", "300", "--sample-size", "1k",
             "--classes", "7", "--samples-per-shard", "100")
    seen = set()
    for b in feedline.Loader(str(ds), batch_size=64):
        labels = b.labels()
        assert labels.dtype == np.int64 and labels.shape == (len(b),)
        assert labels.tolist() == [int(v.tobytes()) for v in b.member(".cls")]
        seen.update(labels.tolist())
    assert seen <= set(range(7)) and len(seen) >= 5, seen


def test_a_label_that_is_not_a_number_names_its_sample(tmp_path):
    import io
    import tarfile
    root = tmp_path / "ds"
    root.mkdir()
    with tarfile.open(root / "shard-000000.tar", "w") as tar:
        for key, cls in (("a", b"3\n"), ("b", b" -12 "), ("c", b"x1"), ("d", b"1_000")):
            for name, data in ((key + ".bin", b"payload"), (key + ".cls", cls)):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    b = next(iter(feedline.Loader(str(root), batch_size=2, shuffle=False)))
    assert b.labels().tolist() == [3, -12]
    b = next(iter(feedline.Loader(str(root), batch_size=4, shuffle=False)))
    with pytest.raises(ValueError, match=r"sample 'c'.*\.cls.*not a decimal label"):
        b.labels()
    with pytest.raises(KeyError):
        b.labels(".txt")
