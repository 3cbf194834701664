"""One settings table, three front doors: every setting of the library's table
(feedline/loader/settings.hpp) is a flag of `feedline run`, a key of its --config files and (unless
only the command line takes it) a Python keyword, each with the table's default and range, each
value checked by the library once and refused in the caller's words.
"""
import importlib.util
import inspect
import json
import os
import subprocess
import warnings

import pytest

import feedline
from feedline import _feedline

from support import FEEDLINE, REPO, gen

SETTINGS = _feedline._settings()
LOADER_SETTINGS = [s for s in SETTINGS if s["scope"] == "loader"]


def flag(s):
    return "--" + s["name"].replace("_", "-")


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return gen(tmp_path_factory.mktemp("settings") / "ds", "--format", "files", "--samples", "64",
               "--sample-size", "1k")


def cli(*args):
    return subprocess.run([FEEDLINE, *args], capture_output=True, text=True, timeout=120)


def test_every_loader_setting_is_a_keyword_with_the_tables_default():
    params = inspect.signature(feedline.Loader).parameters
    keywords = {n: p for n, p in params.items() if p.kind == inspect.Parameter.KEYWORD_ONLY}
    # The table's settings, and the Python front end's own: job_timeout (torch.distributed's
    # job report, feedline/_job.py) has no flag; html, trace and trace_events are the outputs
    # `run --html`, `--trace` and `--trace-events` write.
    assert set(keywords) == {s["name"] for s in LOADER_SETTINGS} | {
        "job_timeout", "html", "trace", "trace_events"}
    for s in LOADER_SETTINGS:
        default = keywords[s["name"]].default
        text = s["default"]
        if text == "":
            assert default is None, s["name"]
        elif s["type"] == "flag":
            assert default is (text == "true"), s["name"]
        elif s["type"] in ("count", "number"):
            assert default == float(text), s["name"]
        else:
            assert default == text, s["name"]
    # help() shows them: the signature and one line each.
    doc = feedline.Loader.__doc__
    for s in LOADER_SETTINGS:
        assert "      %s=" % s["name"] in doc
    # Settings only the command line takes are not keywords.
    for s in SETTINGS:
        if s["scope"] != "loader":
            with pytest.raises(TypeError, match="unexpected keyword argument '%s'" % s["name"]):
                feedline.Loader("/nonexistent", **{s["name"]: 1})


def test_every_setting_is_a_flag_of_run():
    out = cli("run", "--help")
    assert out.returncode == 0, out.stderr
    for s in SETTINGS:
        assert flag(s) in out.stdout, s["name"]
        if s["type"] == "flag":
            assert "--no-" + s["name"].replace("_", "-") in out.stdout


def test_every_default_is_a_config_key_and_a_keyword_value_that_changes_nothing(ds, tmp_path):
    """A config file and a Loader that give every setting its default run as if given none."""
    skip = {"metrics_bind"}  # needs metrics_port, which has no default
    lines = []
    for s in SETTINGS:
        if s["default"] == "" or s["name"] in skip:
            continue
        key = s["name"].replace("_", "-")
        value = s["default"]
        if s["type"] == "flag":
            lines.append("%s = %s" % (key, value))
        elif s["type"] in ("count", "number"):
            lines.append("%s = %s" % (key, value))
        else:
            lines.append('%s = "%s"' % (key, value))
    config = tmp_path / "defaults.toml"
    config.write_text("\n".join(lines) + "\n")
    plain, configured = tmp_path / "plain.json", tmp_path / "configured.json"
    r = cli("run", ds, "--json", str(plain))
    assert r.returncode == 0, r.stderr
    r = cli("run", ds, "--config", str(config), "--json", str(configured))
    assert r.returncode == 0, r.stderr
    a, b = json.loads(plain.read_text()), json.loads(configured.read_text())
    assert a["config"] == b["config"]
    assert a["delivered"]["digest"] == b["delivered"]["digest"]

    kw = {}
    for s in LOADER_SETTINGS:
        default = inspect.signature(feedline.Loader).parameters[s["name"]].default
        if default is not None and s["name"] not in skip:
            kw[s["name"]] = default
    with feedline.Loader(ds, **kw) as loader:
        batches = sum(1 for _ in loader)
        report = loader.report()
    assert batches == 2
    assert report["config"]["io_depth"] == a["config"]["io_depth"]


@pytest.mark.parametrize("s", [s for s in SETTINGS if s["type"] == "count"],
                         ids=lambda s: s["name"])
def test_a_count_out_of_range_is_refused_in_each_front_ends_words(s, ds):
    too_big = str(int(s["max"]) + 1)
    want = "%s is out of range: %s" % (too_big, s["range"])
    r = cli("run", ds, flag(s), too_big)
    assert r.returncode == 2, r.stderr
    assert flag(s) in r.stderr and want in r.stderr, r.stderr
    if s["scope"] == "loader":
        with pytest.raises(ValueError) as e:
            feedline.Loader(ds, **{s["name"]: int(too_big)})
        assert str(e.value) == "%s: %s" % (s["name"], want)
        assert "--" not in str(e.value)


def test_a_choice_not_in_the_table_is_refused_naming_the_choices(ds):
    r = cli("run", ds, "--on-error", "ignore")
    assert r.returncode == 2 and "--on-error" in r.stderr
    assert "'ignore' is not one of fail, skip" in r.stderr
    with pytest.raises(ValueError, match=r"^on_error: 'ignore' is not one of fail, skip$"):
        feedline.Loader(ds, on_error="ignore")


def test_keywords_of_earlier_releases_still_work_with_a_warning(ds):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = feedline.Loader(ds, no_index=True, batch_size=64)
    assert any(issubclass(w.category, DeprecationWarning) and "index=False" in str(w.message)
               for w in caught)
    assert sum(1 for _ in loader) == 1


def test_the_reference_tables_of_the_docs_are_the_tables():
    spec = importlib.util.spec_from_file_location(
        "settings_doc", os.path.join(REPO, "scripts", "settings-doc.py"))
    doc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(doc)
    for path, (now, made) in doc.documents().items():
        assert now == made, "%s: its settings table is stale: run scripts/settings-doc.py" % path


def test_the_run_plans_errors_name_keywords_not_flags(ds):
    # The library's plan (feedline/loader/run_plan.hpp) names settings as placeholders, which the
    # module renders as keywords: io_depth, and shuffle=False for a flag turned off.
    with pytest.raises(ValueError) as e:
        feedline.Loader(ds, io_depth=0)
    assert "io_depth" in str(e.value) and "--" not in str(e.value)
    with pytest.raises(ValueError) as e:
        feedline.Loader(ds, memory_budget="512KiB")
    assert str(e.value) == "memory_budget must be at least 1 MiB"
    with pytest.raises(ValueError) as e:
        feedline.Loader(ds, shard_shuffle=2, shuffle=False)
    assert str(e.value) == "shard_shuffle shuffles: it cannot go with shuffle=False"
    with pytest.raises(ValueError) as e:
        feedline.Loader(ds, endpoint="http://127.0.0.1:9")
    assert str(e.value) == "endpoint, region, profile and sign_request=False are for s3:// URLs"
    # The command line says the same in flag words.
    r = cli("run", ds, "--shard-shuffle", "2", "--no-shuffle")
    assert r.returncode == 2, r.stderr
    assert "--shard-shuffle shuffles: it cannot go with --no-shuffle" in r.stderr
