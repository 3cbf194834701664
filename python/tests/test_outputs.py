"""html= and trace=: the run's HTML page and Chrome trace written from Python, as `feedline run
--html` and `--trace` write them: at the end of the pass or at close(), also after Ctrl-C; paths
checked before any work; a file that cannot be written is an error naming it."""
import html.parser
import json
import os
import signal
import threading

import pytest

import feedline
from support import gen


class _Figures(html.parser.HTMLParser):
    """Every element's (data-key, data-value) the page shows, and its plots' ids."""

    def __init__(self):
        super().__init__()
        self.values = {}
        self.plots = set()
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-key" in a and "data-value" in a:
            self.values[a["data-key"]] = json.loads(a["data-value"])
        if "data-plot" in a:
            self.plots.add(a["data-plot"])
        if "id" in a:
            self.ids.add(a["id"])


def _page(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    p = _Figures()
    p.feed(text)
    return text, p


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return gen(tmp_path_factory.mktemp("outputs") / "d", "--samples", "400", "--sample-size",
               "4KiB")


def test_html_and_trace_written_at_the_end_of_the_pass(data, tmp_path):
    page, trace = tmp_path / "run.html", tmp_path / "run.trace.json"
    loader = feedline.Loader(data, batch_size=32, html=str(page), trace=trace)
    assert not page.exists() and not trace.exists()  # nothing before the run
    batches = sum(1 for _ in loader)
    assert batches == 13
    report = loader.report()
    # The page: the report's figures, each under its JSON key, and the run over time.
    text, figures = _page(page)
    assert text.startswith("<!DOCTYPE html>")
    assert "feedline.Loader" in text and "Loader.report()" in text
    assert figures.values["bottleneck.stage"] == report["bottleneck"]["stage"]
    assert figures.values["input_bound"] == report["input_bound"]
    assert "no-timeline" not in figures.ids  # sampled while the run ran
    assert figures.plots  # throughput, stages, latency: drawn as SVG
    # The trace: Chrome's trace-event JSON with the pipeline's threads and this run's name.
    with open(trace) as f:
        doc = json.load(f)
    assert doc["otherData"]["command"] == "feedline.Loader"
    assert doc["otherData"]["url"] == data
    threads = {e["args"]["name"] for e in doc["traceEvents"]
               if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert "fl-storage-0" in threads and "fl-decode-0" in threads and "consumer" in threads
    spans = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert spans
    # Closed by the end of the pass, its report and state still there.
    assert loader.report() == report
    assert isinstance(loader.state_dict(), dict)  # state_dict() still answers
    loader.close()  # again: nothing more, nothing rewritten
    assert _page(page)[0] == text


def test_close_mid_run_writes_the_run_so_far(data, tmp_path):
    page, trace = tmp_path / "p.html", tmp_path / "t.json"
    with feedline.Loader(data, batch_size=8, html=page, trace=str(trace)) as loader:
        next(loader)
        next(loader)
    assert page.exists() and trace.exists()
    _, figures = _page(page)
    assert figures.values["bottleneck.stage"] == loader.report()["bottleneck"]["stage"]
    with open(trace) as f:
        assert json.load(f)["traceEvents"]


def test_ctrl_c_still_writes_the_page(data, tmp_path):
    page = tmp_path / "interrupted.html"
    loader = feedline.Loader(data, batch_size=8, html=page, throttle_bw="64KiB")
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in loader:
                pass
    finally:
        timer.cancel()
    loader.close()
    text, figures = _page(page)
    assert "Interrupted" in text
    assert loader.report()["interrupted"] is True


def test_paths_are_checked_before_any_work(data, tmp_path):
    with pytest.raises(ValueError, match="html=.*inside the dataset"):
        feedline.Loader(data, html=os.path.join(data, "page.html"))
    with pytest.raises(ValueError, match="trace=.*is the dataset|trace=.*inside the dataset"):
        feedline.Loader(data, trace=os.path.join(data, ".feedline-dataset"))
    same = str(tmp_path / "same")
    with pytest.raises(ValueError, match="name the same file"):
        feedline.Loader(data, html=same, trace=same)
    with pytest.raises(ValueError, match="html=.*no-such-dir.*cannot create a file there"):
        feedline.Loader(data, html=str(tmp_path / "no-such-dir" / "p.html"))
    with pytest.raises(ValueError, match="html=.*is a directory"):
        feedline.Loader(data, html=str(tmp_path))
    with pytest.raises(ValueError, match="needs a file name"):
        feedline.Loader(data, trace="")
    with pytest.raises(TypeError, match="html must be a path"):
        feedline.Loader(data, html=True)
    with pytest.raises(ValueError, match="trace_events=10 is out of range"):
        feedline.Loader(data, trace=str(tmp_path / "t.json"), trace_events=10)
    assert os.listdir(tmp_path) == []  # no file, no temporary, left behind


def test_trace_events_bounds_the_trace(data, tmp_path):
    trace = tmp_path / "small.json"
    for _ in feedline.Loader(data, batch_size=32, trace=trace, trace_events=100):
        pass
    with open(trace) as f:
        doc = json.load(f)
    assert doc["otherData"]["max_events"] == 100
    assert doc["otherData"]["events_kept"] <= 100
    assert doc["otherData"]["complete"] is False


def test_a_page_that_cannot_be_written_is_an_error_naming_it(data, tmp_path):
    d = tmp_path / "gone"
    d.mkdir()
    page = d / "p.html"
    loader = feedline.Loader(data, batch_size=64, html=page)
    for name in os.listdir(d):  # the temporary file beside it, and then its directory
        os.unlink(d / name)
    d.rmdir()
    with pytest.raises(feedline.Error, match="p.html"):
        for _ in loader:
            pass
    assert loader.report()["delivered"]["samples"] == 400  # the run itself was whole


def test_html_keywords_in_the_signature():
    import inspect
    params = inspect.signature(feedline.Loader).parameters
    assert params["html"].default is None and params["trace"].default is None
    assert params["trace_events"].default == 1_000_000
