#!/usr/bin/env bash
# Plain http:// against nginx: range reads with bench storage (sequential and random, every byte
# accounted for), pipeline runs over brace-expanded URL lists and directory URLs (nginx's JSON
# listings; tar shards and one file per sample) with the local copy's digest, and clear errors for a missing object, a missing member of a list,
# a closed port and an unknown host. A directory behind auth_basic: http://user:password@host/
# URLs read it (the credentials are really sent, as Basic authentication), a wrong or missing
# password is a clear 401, and the password appears in no output, JSON report or log.
# Usage: http_nginx.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
source "$here/net_lib.sh"
source "$here/../servers/servers.sh"
net_test_start "$@"
write_digest_py "$scratch/digest.py"
require_xxhash
run_timeout=120

www=$scratch/www
mkdir -p "$www"
head -c $((48 << 20)) /dev/urandom >"$www/big.bin"
must_gen "$www/tar" --format tar --samples 300 --samples-per-shard 30 --sample-size normal:20KiB:6KiB --compress zstd:3 \
  --compressibility 0.5 --seed 31
must_gen "$www/files" --format files --samples 120 --sample-size uniform:0:30000 --seed 32
# Names that are not UTF-8 (Linux names are bytes; nginx writes them into its JSON listing as
# they are): Latin-1, a lone continuation byte, a truncated sequence, and a plain one.
mkdir -p "$www/bytes"
for n in $'caf\xe9.bin' $'a\x80b.bin' $'trunc\xe2\x82.bin' plain.bin; do head -c 1000 /dev/urandom >"$www/bytes/$n"; done
# /protected/: the tar shards again, behind HTTP Basic authentication (an htpasswd entry made by
# openssl). The password has an '@', percent-encoded in URLs; both forms are secrets.
password='Tr0ub4dor@3x'
password_in_url='Tr0ub4dor%403x'
wrong_password='Wr0ngPassw0rd'
secrets+=("$password" "$password_in_url" "$wrong_password")
mkdir -p "$www/protected" "$scratch/auth"
cp -r "$www/tar" "$www/protected/tar"
printf 'reader:%s\n' "$(openssl passwd -apr1 "$password")" >"$scratch/auth/htpasswd"
nginx_server_extra="location /protected/ { auth_basic \"feedline\"; auth_basic_user_file $scratch/auth/htpasswd; }"
ngport=$(free_port)
start_nginx "$www" "$ngport" || { echo "FAIL: nginx did not start"; exit 1; }
base=http://127.0.0.1:$ngport
# The server itself: the password opens it, nothing else does.
curl -fsS -o /dev/null -u "reader:$password" "$base/protected/tar/shard-000000.tar" ||
  { echo "FAIL: nginx's auth_basic location does not take the password (curl)"; exit 1; }
[[ $(curl -s -o /dev/null -w '%{http_code}' "$base/protected/tar/shard-000000.tar") == 401 ]] ||
  { echo "FAIL: nginx's auth_basic location answers without a password"; exit 1; }

# --- bench storage ----------------------------------------------------------------------------------
for shape in "--rw read --bs 1m --iodepth 8" "--rw read --bs 8m --iodepth 4" "--rw randread --bs 64k --iodepth 16 --size 16m" \
  "--rw read --bs 4m --iodepth 6 --part-size 1m --http-loops 3"; do
  read -ra a <<<"$shape"
  checks=$((checks + 1))
  must_frun "bench storage $shape" bench storage "$base/big.bin" "${a[@]}" --output json || continue
  cp "$out" "$scratch/bench.json"
  want=$((48 << 20))
  [[ $shape == *16m* ]] && want=$((16 << 20))
  loops=1
  [[ $shape == *--http-loops* ]] && loops=3
  problems=$(json_check "$scratch/bench.json" \
    "d['bytes'] == $want and d['errors'] == 0 and d['engine'] == 'http' and d['backend_counters'].get('http_requests', 0) >= d['ios'] and d['backend_histograms']['ttfb_ns']['count'] > 0 and d['cpu_seconds_per_gib'] > 0 and ($loops == 1 or '$loops event loops for parts >= 1 MiB' in d['engine_features'])" \
    "bench storage $shape: expected $want bytes, no errors, engine http, http_requests >= ios, ttfb and CPU reported ($loops event loops)")
  [[ -z $problems ]] && echo "ok: bench storage $base/big.bin $shape: $want bytes, $(json_get "$scratch/bench.json" "'%.0f MB/s' % (d['bandwidth_bytes_per_second'] / 1e6)")" ||
    { fail "$problems"; show report "$scratch/bench.json"; }
done

# --- runs over URL lists ----------------------------------------------------------------------------
for v in tar files; do
  checks=$((checks + 1))
  must_frun "run local $v" run "$www/$v" --batch-size 16 --json "$scratch/local-$v.json" || continue
  py_digest "$www/$v"
  checks=$((checks + 1))
  [[ $(json_get "$scratch/local-$v.json" 'd["delivered"]["digest"]') == "$want_digest" ]] ||
    fail "run local $v: digest differs from Python's"
done
checks=$((checks + 1))
must_frun "run http tar shards" run "$base/tar/shard-{000000..000009}.tar" --format tar --batch-size 16 --json "$scratch/http-tar.json" &&
  same_digest "run $base/tar/shard-{000000..000009}.tar --format tar" "$scratch/local-tar.json" "$scratch/http-tar.json"
# --format auto (the default) must see .tar shards in a URL list as it does in a directory.
checks=$((checks + 1))
must_frun "run http tar shards, --format auto" run "$base/tar/shard-{000000..000009}.tar" --batch-size 16 --json "$scratch/http-tar-auto.json" &&
  same_digest "run $base/tar/shard-{000000..000009}.tar (format auto)" "$scratch/local-tar.json" "$scratch/http-tar-auto.json"
checks=$((checks + 1))
must_frun "run http files" run "$base/files/{000000..000119}.bin" --format files --batch-size 16 --io-depth 32 \
  --json "$scratch/http-files.json" &&
  same_digest "run $base/files/{000000..000119}.bin" "$scratch/local-files.json" "$scratch/http-files.json"
# nginx lists directories as JSON here (autoindex_format json): a directory URL is a dataset, and
# the brace list above took its sizes from that listing.
checks=$((checks + 1))
must_frun "run http files, directory URL" run "$base/files/" --format files --batch-size 16 --json "$scratch/http-dir.json" &&
  same_digest "run $base/files/ (JSON directory listing)" "$scratch/local-files.json" "$scratch/http-dir.json"
checks=$((checks + 1))
must_frun "run http tar shards, directory URL" run "$base/tar/" --batch-size 16 --json "$scratch/http-tar-dir.json" &&
  same_digest "run $base/tar/ (JSON directory listing, format auto)" "$scratch/local-tar.json" "$scratch/http-tar-dir.json"
# A listing with names that are not UTF-8: every file read, by its bytes (the listing was refused
# as invalid JSON, and the directory URL failed).
checks=$((checks + 1))
must_frun "run http files, directory URL, names not UTF-8" run "$base/bytes/" --format files --batch-size 2 \
  --json "$scratch/http-bytes.json" &&
  { problems=$(json_check "$scratch/http-bytes.json" "d['delivered']['samples'] == 4 and d['dataset']['bytes'] == 4000" \
    "the 4 files of a directory with names that are not UTF-8 were not all delivered")
    [[ -z $problems ]] && echo "ok: run $base/bytes/: 4 files with names that are not UTF-8 delivered" || fail "$problems"; }
# Four accelerators on one host read through one connection pool: with --connections 3 the host
# opens 3 in all (apart, each accelerator would open 3), and every sample arrives once.
checks=$((checks + 1))
if must_frun "run http files, 4 accelerators, 3 connections" run "$base/files/" --accelerators 4 --batch-size 8 \
  --connections 3 --json "$scratch/http-accel.json"; then
  same_digest "run $base/files/ --accelerators 4" "$scratch/local-files.json" "$scratch/http-accel.json"
  checks=$((checks + 1))
  conns=$(json_get "$scratch/http-accel.json" '"%s %s %s" % (d["connections"]["shared"], d["connections"]["opened"], d["connections"]["peak"])')
  read -r shared opened peak <<<"$conns"
  if [[ $shared == True ]] && ((opened >= 1 && opened <= 3 && peak <= 3)) &&
    grep -q "connections: one pool for the host's accelerators, $opened opened" "$out"; then
    echo "ok: 4 accelerators share one pool: $opened connection(s) opened, at most $peak open"
  else
    fail "4 accelerators with --connections 3: connections '$conns' (want shared, at most 3 opened)"
    show stdout "$out"
  fi
fi
# Shard shuffle: runs of consecutive members of a shard, whose ranges coalesce into shared GETs.
checks=$((checks + 1))
must_frun "run http tar shards, --shard-shuffle 3" run "$base/tar/shard-{000000..000009}.tar" --batch-size 15 --shard-shuffle 3 \
  --json "$scratch/http-tar-shards.json" &&
  same_digest "run $base/tar/... --shard-shuffle 3" "$scratch/local-tar.json" "$scratch/http-tar-shards.json" &&
  { problems=$(json_check "$scratch/http-tar-shards.json" \
      "d['config']['shard_shuffle'] == 3 and d['io']['counters'].get('http_coalesced_reads', 0) > 0" \
      "run --shard-shuffle 3 over http: expected coalesced reads")
    [[ -z $problems ]] && echo "ok: run --shard-shuffle 3 over http: $(json_get "$scratch/http-tar-shards.json" "d['io']['counters']['http_coalesced_reads']") reads coalesced" || fail "$problems"; }
# Every HTTP counter the docs list (docs/backends/http.md, the names of storage/counters.hpp;
# test_counters.cpp checks that the two agree) is in that run's report: each exact name, and the
# requests by status (http_status_<code>), which add up to the requests.
checks=$((checks + 1))
problems=$("$py" - "$here/../../docs/backends/http.md" "$scratch/http-tar-shards.json" <<'PY'
import json, re, sys
doc = open(sys.argv[1], encoding="utf-8").read()
table = doc[doc.index("\n## Metrics\n") + 1:]
table = table[:table.index("\n## ")]
names = set()
for line in table.splitlines():
    if line.startswith("| `"):
        names.update(re.findall(r"`([a-z0-9_]+(?:<[a-z]+>)?)`", line.split("|")[1]))
io = json.loads(open(sys.argv[2], "rb").read().decode("utf-8"))["io"]
have = set(io["counters"]) | set(io["histograms"])
exact = sorted(n for n in names if "<" not in n)
bad = ["%s is documented but not in the report" % n for n in exact if n not in have]
if len(exact) < 10: bad.append("only %d names in the docs' table: %s" % (len(exact), exact))
statuses = {k: v for k, v in io["counters"].items() if k.startswith("http_status_")}
if "http_status_<code>" not in names: bad.append("the docs' table has no http_status_<code>")
if not statuses.get("http_status_206") or sum(statuses.values()) != io["counters"].get("http_requests"):
    bad.append("http_status_* %r do not add up to http_requests %r" % (statuses, io["counters"].get("http_requests")))
print("; ".join(bad))
PY
)
[[ -z $problems ]] && echo "ok: every HTTP counter docs/backends/http.md lists is in a run's report; statuses add up to the requests" ||
  fail "run --shard-shuffle 3 over http: $problems"
checks=$((checks + 1))
# Over a network the read-ahead window holds 16 x --io-depth samples (batch 4, depth 16: 64
# buffers, the cap), within half the memory budget (8 MiB: fewer, never below prefetch + 2).
must_frun "run http files, small batches" run "$base/files/{000000..000119}.bin" --format files --batch-size 4 \
  --io-depth 16 --json "$scratch/http-window.json" &&
  { problems=$(json_check "$scratch/http-window.json" \
      "d['io']['batch_buffers'] == 64 and d['io']['window_samples'] == 256 and d['delivered']['samples'] == 120" \
      "run over http with batch 4, io-depth 16: expected 64 batch buffers and a 256-sample window")
    [[ -z $problems ]] && echo "ok: run over http, batch 4: 64 batch buffers, 256-sample window" || fail "$problems"; }
must_frun "run http files, small batches, 8 MiB budget" run "$base/files/{000000..000119}.bin" --format files \
  --batch-size 4 --io-depth 16 --memory-budget 8MiB --json "$scratch/http-window-8m.json" &&
  { problems=$(json_check "$scratch/http-window-8m.json" \
      "4 <= d['io']['batch_buffers'] < 64 and d['io']['window_samples'] == max(4 * d['io']['batch_buffers'], 32) and d['memory']['peak_bytes'] <= 8 << 20" \
      "run over http with an 8 MiB budget: expected between 4 and 63 batch buffers, within the budget")
    [[ -z $problems ]] && echo "ok: run over http, 8 MiB budget: $(json_get "$scratch/http-window-8m.json" "d['io']['batch_buffers']") batch buffers" || fail "$problems"; }

must_frun "run http tar, 2 connections, 2 epochs" run "$base/tar/shard-{000000..000009}.tar" --format tar --connections 2 --epochs 2 \
  --batch-size 5 --json "$scratch/http-tar-2.json" &&
  { problems=$(json_check "$scratch/http-tar-2.json" "d['delivered']['samples'] == 600 and str(d['delivered']['digest']) == '$(times 2 "$(json_get "$scratch/local-tar.json" 'd["delivered"]["digest"]')")'" \
      "run over 2 connections, 2 epochs: expected 600 samples with twice the digest")
    [[ -z $problems ]] && echo "ok: run over 2 connections, 2 epochs: exactly once per epoch" || fail "$problems"; }

# --- credentials in the URL ---------------------------------------------------------------------------
# Read through auth_basic: the same samples and digest as the local copy, so the credentials were
# sent (nginx answers 401 to every request without them).
auth=http://reader:$password_in_url@127.0.0.1:$ngport
checks=$((checks + 1))
must_frun "run with credentials in the URL" run "$auth/protected/tar/shard-{000000..000009}.tar" --format tar --batch-size 16 \
  --json "$scratch/auth-tar.json" &&
  same_digest "run http://reader:***@.../protected/tar/shard-{000000..000009}.tar" "$scratch/local-tar.json" "$scratch/auth-tar.json"
# A directory URL: the JSON listings are fetched with the credentials too.
checks=$((checks + 1))
must_frun "run a protected directory URL" run "$auth/protected/tar/" --batch-size 16 --json "$scratch/auth-tar-dir.json" &&
  same_digest "run http://reader:***@.../protected/tar/ (listing behind auth_basic)" "$scratch/local-tar.json" "$scratch/auth-tar-dir.json"
checks=$((checks + 1))
must_frun "bench storage with credentials in the URL" bench storage "$auth/protected/tar/shard-000000.tar" --rw read --bs 64k \
  --output json && cp "$out" "$scratch/auth-bench.json" &&
  { problems=$(json_check "$scratch/auth-bench.json" "d['errors'] == 0 and d['bytes'] > 0" \
      "bench storage through auth_basic: expected bytes and no errors")
    [[ -z $problems ]] && echo "ok: bench storage through auth_basic" || fail "$problems"; }
# Also the text report and the progress of a plain run name the URL: no password there either.
must_frun "bench storage with credentials, text report" bench storage "$auth/protected/tar/shard-000001.tar" --rw read --bs 64k
# The URL is shown with the user and without the password.
checks=$((checks + 1))
if grep -q "reader:\*\*\*@127.0.0.1:$ngport" "$out" "$scratch/auth-bench.json" "$scratch/auth-tar.json"; then
  echo "ok: the URL is shown as http://reader:***@host/..."
else
  fail "no output shows the URL as http://reader:***@127.0.0.1:$ngport/... (redacted)"
  show stdout "$out"
fi
# A wrong password and none at all: HTTP 401, one clear line, and no password in it.
expect_net_error "wrong password" 30 "401" "127.0.0.1:$ngport/protected/tar/shard-" "check them" \
  -- run "http://reader:$wrong_password@127.0.0.1:$ngport/protected/tar/shard-{000000..000009}.tar" --format tar \
  --json "$scratch/auth-wrong.json"
expect_net_error "wrong password (bench, JSON)" 30 "401" \
  -- bench storage "http://reader:$wrong_password@127.0.0.1:$ngport/protected/tar/shard-000000.tar" --output json
cp "$out" "$scratch/auth-wrong-bench.json"
expect_net_error "no password" 30 "401" "http://user:password@host/" -- bench storage "$base/protected/tar/shard-000000.tar" --output json
# Every output, JSON report and server log of this script: no password (check_no_secrets below
# also greps every file of the scratch directory, the JSON reports of the failed runs included).
checks=$((checks + 1))
leaks=$(grep -lF -e "$password" -e "$password_in_url" -e "$wrong_password" "$scratch"/*.json "$scratch/all-output.txt" 2>/dev/null)
[[ -z $leaks ]] && echo "ok: no password in stdout, stderr or any --json / --output json report" ||
  fail "a password appears in: $leaks"

# --- bad input ----------------------------------------------------------------------------------------
expect_net_error "missing object" 60 "$base/nope.bin" "404" -- bench storage "$base/nope.bin" --output json
expect_net_error "a missing member of a URL list" 60 "000010.tar" \
  -- run "$base/tar/shard-{000000..000010}.tar" --json "$scratch/missing.json"
# ... also where the sizes come from the directory's listing (120 names there, one not listed).
expect_net_error "a missing member of a listed URL list" 60 "000120.bin" \
  -- run "$base/files/{000000..000120}.bin" --format files --json "$scratch/missing-listed.json"
expect_net_error "a directory URL to bench storage" 20 "names a directory" "$base/files/" \
  -- bench storage "$base/files/" --output json
expect_net_error "a missing directory" 60 "no samples" "no-such-dir/" \
  -- run "$base/files/no-such-dir/" --format files --json "$scratch/missing-dir.json"
closed=$(free_port)
expect_net_error "closed port" 40 "re:127\.0\.0\.1(:| port )$closed" \
  -- bench storage "http://127.0.0.1:$closed/big.bin" --max-attempts 3 --output json
expect_net_error "unknown host" 40 "no-such-host.invalid" \
  -- bench storage "http://no-such-host.invalid:9/big.bin" --max-attempts 2 --output json

check_no_secrets
finish http_nginx
