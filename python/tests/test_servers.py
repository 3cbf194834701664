"""feedline.Loader over real servers: s3rver behind tests/servers/s3proxy.py (which checks every
SigV4 signature with botocore), nginx (JSON directory listings) and nfs-ganesha (NFSv4).

Each server starts once per module, the way the CLI tests start it (the bash functions of
tests/servers/servers.sh and tests/servers/ganesha.sh, through support.ServerGroup), and stops
at the end however the tests end. A server tool missing on this machine makes its tests SKIPPED
with the reason (scripts/install-deps.sh --test and tests/servers/setup.sh install them all);
one that is installed but does not start is an error.

Run by ctest as python.pytest_servers; by hand: PYTHONPATH=build/release/python
FEEDLINE_BIN=build/release/tools/feedline /usr/bin/python3 -m pytest -rs python/tests/test_servers.py
"""
import errno
import json
import os

import pytest

import feedline
from support import (SERVERS, ServerGroup, gen, manifest_digest, missing_tools, run_all,
                     tool_env)

# s3rver accepts any key; the proxy knows only this pair. The secret is unique to this run so
# that a leak into a message or a report is found by a plain substring test.
ACCESS_KEY = "S3RVER"
SECRET = "fl-py-secret-%d-do-not-print" % os.getpid()
WRONG_SECRET = SECRET + "-but-wrong"
SAMPLES = {"tar": 200, "files": 120}


def no_secret(text):
    assert SECRET not in text and WRONG_SECRET not in text, "a secret key appears in: " + text


def backend_missing(url):
    """Why this feedline cannot read `url`'s scheme (built without its backend), or None."""
    try:
        feedline.Loader(url, max_attempts=1, connect_timeout="1s")
    except feedline.Error as e:
        if "built without" in str(e):
            return str(e)
    except (ValueError, OSError):
        pass
    return None


def skip_unless(*tools, scheme_url=None):
    missing = missing_tools(*tools)
    if missing:
        pytest.skip("missing test tools: %s (scripts/install-deps.sh --test; tests/servers/setup.sh)"
                    % ", ".join(missing))
    if scheme_url:
        why = backend_missing(scheme_url)
        if why:
            pytest.skip(why)


def check_run(loader, ds_dir, samples, manifest=True):
    """The run delivered every sample once, and its digest is `feedline gen`'s. With `manifest`,
    the loader found gen's manifest too and checked the digest itself."""
    keys, digest, _ = run_all(loader)
    assert len(keys) == samples and len(set(keys)) == samples, "every key exactly once"
    want = manifest_digest(ds_dir)
    assert digest == want, "the batches' digests add up to gen's"
    report = loader.report()
    assert report["delivered"]["digest"] == want
    assert report["delivered"]["samples"] == samples
    assert report["delivered"]["verified"] is (True if manifest else None)
    assert report["interrupted"] is False
    return report


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("servers")


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    gen(root / "tar", "--format", "tar", "--samples", str(SAMPLES["tar"]), "--samples-per-shard",
        "40", "--sample-size", "uniform:1:20000", "--seed", "3")
    gen(root / "files", "--format", "files", "--samples", str(SAMPLES["files"]), "--sample-size",
        "uniform:0:8000", "--seed", "4")
    return str(root)


# --- S3: s3rver behind the signature-checking proxy ---------------------------------------------

class S3:
    def __init__(self, endpoint, stats):
        self.endpoint = endpoint
        self.stats_file = stats

    def sigv4(self):
        with open(self.stats_file) as f:
            return json.load(f)["sigv4"]


@pytest.fixture(scope="module")
def s3(datasets, workdir):
    skip_unless("node", os.path.join(SERVERS, "node_modules", "s3rver", "bin", "s3rver.js"),
                "/usr/bin/aws", scheme_url="s3://probe/x")
    home = workdir / "home"
    home.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        # The loader takes its credentials from the environment, as the CLI does; nothing of
        # this machine's (~/.aws, a profile, an endpoint) may leak in.
        mp.setenv("HOME", str(home))
        for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE",
                    "AWS_SHARED_CREDENTIALS_FILE", "AWS_SESSION_TOKEN", "AWS_CA_BUNDLE"):
            mp.delenv(var, raising=False)
        mp.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        mp.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        mp.setenv("AWS_REGION", "us-east-1")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        stats = workdir / "proxy-stats.json"
        body = """
            s3port=$(free_port)
            start_s3rver "$W/s3data" "$s3port" || exit 1
            proxy=$(free_port)
            start_s3proxy "$s3port" "$proxy" --verify-sigv4 "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \\
              --require-auth --stats "$W/proxy-stats.json" || exit 1
            s3_env "$proxy"
            awscli s3 mb s3://bench >&2 || exit 1
            s3_upload "$D/tar" s3://bench/tar/ || exit 1
            s3_upload "$D/files" s3://bench/files/ || exit 1
            echo "ready $proxy"
        """
        group = ServerGroup("s3", body, workdir=str(workdir),
                            env=tool_env(W=str(workdir), D=datasets, SERVERS_KEEP="1",
                                         servers_dir=str(workdir / "s3-logs")))
        try:
            yield S3("http://127.0.0.1:%s" % group.words[0], str(stats))
        finally:
            group.stop()


@pytest.mark.parametrize("kind", ["tar", "files"])
def test_s3_digest_equals_gen(s3, datasets, kind):
    before = s3.sigv4()
    loader = feedline.Loader("s3://bench/%s/" % kind, endpoint=s3.endpoint, batch_size=16,
                             seed=1, io_depth=8)
    report = check_run(loader, os.path.join(datasets, kind), SAMPLES[kind])
    assert report["io"]["counters"]["http_requests"] > 0
    no_secret(json.dumps(report))
    after = s3.sigv4()
    # Every request reached s3rver through the proxy, signed with the key in the environment.
    assert after["verified"] > before["verified"]
    assert after["failed"] == before["failed"] and after["unsigned"] == before["unsigned"]


def test_s3_credentials_from_a_profile(s3, datasets, workdir, monkeypatch):
    creds = workdir / "credentials"
    creds.write_text("[ci]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                     % (ACCESS_KEY, SECRET))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    before = s3.sigv4()
    check_run(feedline.Loader("s3://bench/files/", endpoint=s3.endpoint, profile="ci"),
              os.path.join(datasets, "files"), SAMPLES["files"])
    after = s3.sigv4()
    assert after["verified"] > before["verified"] and after["failed"] == before["failed"]


def test_s3_wrong_secret_is_a_clear_error_without_the_secret(s3, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRONG_SECRET)
    with pytest.raises(feedline.Error) as e:
        run_all(feedline.Loader("s3://bench/files/", endpoint=s3.endpoint, max_attempts=1))
    msg = str(e.value)
    assert e.value.errno == errno.EACCES
    assert "403" in msg and "s3://bench" in msg, msg
    no_secret(msg)


def test_s3_missing_bucket_names_it(s3):
    with pytest.raises(feedline.Error) as e:
        run_all(feedline.Loader("s3://no-such-bucket-fl/ds/", endpoint=s3.endpoint))
    msg = str(e.value)
    assert "no-such-bucket-fl" in msg, msg
    no_secret(msg)


def test_s3_missing_object_names_it(s3):
    # shard-000005.tar is one past the last of the 5 shards.
    with pytest.raises(feedline.Error) as e:
        run_all(feedline.Loader("s3://bench/tar/shard-{000000..000005}.tar",
                                endpoint=s3.endpoint, format="tar"))
    msg = str(e.value)
    assert e.value.errno == errno.ENOENT
    assert "shard-000005.tar" in msg, msg
    no_secret(msg)


# --- HTTP: nginx, datasets as directory URLs (JSON listings) ------------------------------------

@pytest.fixture(scope="module")
def http(datasets, workdir):
    skip_unless("nginx", scheme_url="http://127.0.0.1:1/x")
    body = """
        port=$(free_port)
        start_nginx "$D" "$port" || exit 1
        echo "ready $port"
    """
    group = ServerGroup("nginx", body, workdir=str(workdir),
                        env=tool_env(D=datasets, SERVERS_KEEP="1",
                                     servers_dir=str(workdir / "nginx-logs")))
    try:
        yield "http://127.0.0.1:%s" % group.words[0]
    finally:
        group.stop()


@pytest.mark.parametrize("kind", ["tar", "files"])
def test_http_listing_digest_equals_gen(http, datasets, kind):
    loader = feedline.Loader("%s/%s/" % (http, kind), batch_size=16, seed=2, epochs=1)
    # nginx's listings leave out dot files: gen's manifest (.feedline-dataset) is not seen.
    report = check_run(loader, os.path.join(datasets, kind), SAMPLES[kind], manifest=False)
    assert report["io"]["counters"]["http_requests"] > 0


def test_http_missing_object_names_it(http):
    with pytest.raises(feedline.Error) as e:
        run_all(feedline.Loader(http + "/tar/shard-{000000..000005}.tar", format="tar"))
    assert e.value.errno == errno.ENOENT
    assert "shard-000005.tar" in str(e.value), str(e.value)


def test_http_missing_directory_names_it(http):
    with pytest.raises(feedline.Error) as e:
        run_all(feedline.Loader(http + "/no-such-dir/", format="files"))
    assert e.value.errno == errno.ENOENT
    assert "no-such-dir/" in str(e.value), str(e.value)


# --- NFS: nfs-ganesha (NFSv4, no rpcbind) -------------------------------------------------------

@pytest.fixture(scope="module")
def nfs(datasets, workdir):
    if os.geteuid() != 0:
        pytest.skip("nfs-ganesha's VFS backend needs root (open_by_handle_at)")
    skip_unless("ganesha.nfsd", scheme_url="nfs://127.0.0.1/export/x?version=4&nfsport=1")
    ganesha = os.path.join(SERVERS, "ganesha.sh")
    state = workdir / "ganesha"
    body = """
        port=$(free_port)
        bash "$G" start "$S" "$D" "$port" >&2 || exit 1
        echo "ready $port"
    """
    group = ServerGroup("ganesha", body, cleanup='bash "$G" stop "$S" >&2',
                        workdir=str(workdir),
                        env=tool_env(G=ganesha, S=str(state), D=datasets))
    try:
        port = group.words[0]
        yield lambda path: "nfs://127.0.0.1/export/%s?version=4&nfsport=%s" % (path, port)
    finally:
        group.stop()


@pytest.mark.parametrize("kind", ["tar", "files"])
def test_nfs_digest_equals_gen(nfs, datasets, kind):
    loader = feedline.Loader(nfs(kind), batch_size=16, seed=4, connections=2)
    report = check_run(loader, os.path.join(datasets, kind), SAMPLES[kind])
    assert report["io"]["engine"] == "nfs"


def test_nfs_missing_path_names_it(nfs):
    with pytest.raises(feedline.Error) as e:
        run_all(feedline.Loader(nfs("no-such-dataset")))
    assert e.value.errno == errno.ENOENT
    assert "nfs://127.0.0.1/export/no-such-dataset" in str(e.value), str(e.value)
