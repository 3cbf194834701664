"""A state_dict() names the dataset it was saved on (its listing's fingerprint): it resumes only
there. Sample indices mean other samples on another dataset of the same size, or on shards whose
contents were swapped, and a resume there delivered some samples twice and lost others."""
import json
import os
import shutil

import pytest

import feedline

from support import gen, run_all


@pytest.fixture(scope="module")
def tars(tmp_path_factory):
    root = tmp_path_factory.mktemp("state")
    args = ("--format", "tar", "--samples", "300", "--sample-size", "2k", "--samples-per-shard", "50")
    a = gen(root / "a", *args, "--seed", "1")
    b = gen(root / "b", *args, "--seed", "2")
    # a's shards 0 and 1 with their contents swapped (their indexes with them): the same names,
    # sizes and sample count.
    swapped = str(root / "swapped")
    shutil.copytree(a, swapped)
    for ext in ("", ".idx"):
        s0 = os.path.join(swapped, "shard-000000.tar" + ext)
        s1 = os.path.join(swapped, "shard-000001.tar" + ext)
        os.rename(s0, s0 + ".tmp")
        os.rename(s1, s0)
        os.rename(s0 + ".tmp", s1)
    return a, b, swapped


def saved_state(url):
    loader = feedline.Loader(url, batch_size=10, seed=3)
    for _ in range(5):
        next(loader)
    state = loader.state_dict()
    loader.close()
    return state


def test_state_names_its_dataset_and_resumes_there(tars):
    a, _, _ = tars
    state = saved_state(a)
    assert state["version"] == 2 and len(state["dataset"]) == 16
    keys, _, _ = run_all(feedline.Loader(a, batch_size=10, seed=3, state=json.dumps(state)))
    assert len(keys) == 300 - 50


def test_state_resumes_whether_shards_are_read_by_index_or_scanned(tars):
    # The same dataset read through its tar indexes (spans from each member's header) and by a
    # scan of its headers (spans from the data): one listing, one fingerprint (a state saved on
    # one was refused on the other as "another dataset").
    a, _, _ = tars
    state = saved_state(a)
    keys, _, _ = run_all(feedline.Loader(a, batch_size=10, seed=3, state=state, index=False))
    assert len(keys) == 300 - 50
    loader = feedline.Loader(a, batch_size=10, seed=3, index=False)
    next(loader)
    scanned = loader.state_dict()
    loader.close()
    assert scanned["dataset"] == state["dataset"]


@pytest.mark.parametrize("which", ["another dataset of the same size", "shards swapped"])
def test_state_refused_on_another_listing(tars, which):
    a, b, swapped = tars
    state = saved_state(a)
    other = b if which.startswith("another") else swapped
    with pytest.raises(ValueError, match="fingerprint"):
        feedline.Loader(other, batch_size=10, seed=3, state=state)


def test_state_of_version_1_refused_with_what_to_do(tars):
    a, _, _ = tars
    state = saved_state(a)
    del state["dataset"]
    state["version"] = 1
    with pytest.raises(ValueError, match="start epoch 0 afresh"):
        feedline.Loader(a, batch_size=10, seed=3, state=state)
