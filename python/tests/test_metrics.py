"""metrics_port=: a Prometheus endpoint while an embedded loader lives, scraped from the training
loop's own process mid-epoch and parsed with prometheus_client's parser (python3-prometheus-client)."""
import urllib.error
import urllib.request

import pytest

import feedline

from support import gen

parser = pytest.importorskip("prometheus_client.parser")


def scrape(url):
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out = {}
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_scrape_mid_epoch_counts_what_was_delivered(tmp_path):
    ds = gen(tmp_path / "ds", "--format", "files", "--samples", "2000", "--sample-size", "4k")
    loader = feedline.Loader(ds, batch_size=50, metrics_port=0, prefetch=2)
    url = loader.metrics_url
    assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
    delivered = 0
    seen = []
    for i, b in enumerate(loader):
        delivered += len(b)
        if i in (5, 20):
            m = scrape(url)
            # The consumer's count is exactly what this loop received (the scrape runs on the
            # endpoint's thread while the loop waits here, holding the batch).
            assert m[("feedline_samples_total", ())] == delivered
            assert m[("feedline_running", ())] == 1
            assert m[("feedline_consumer_wait_seconds_count", ())] == i + 1
            for q in ("reads", "decoded", "batches", "batch-pool"):
                depth = m[("feedline_queue_depth", (("queue", q),))]
                assert 0 <= depth <= m[("feedline_queue_capacity", (("queue", q),))]
            seen.append(m[("feedline_storage_reads_total", ())])
    assert delivered == 2000
    assert seen[0] <= seen[1]
    report = loader.report()
    assert report["samples"] == 2000
    loader.close()


def test_bad_port_is_a_value_error(tmp_path):
    ds = gen(tmp_path / "ds", "--format", "files", "--samples", "10", "--sample-size", "1k")
    with pytest.raises(ValueError, match="metrics_bind|IPv4"):
        feedline.Loader(ds, metrics_port=0, metrics_bind="not-an-address")
    assert feedline.Loader(ds).metrics_url is None
