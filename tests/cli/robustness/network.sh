# shellcheck shell=bash
# The variables and helpers of tests/cli/lib.sh and tests/cli/robustness.sh are set there:
# shellcheck disable=SC2154
# Robustness section (sourced by tests/cli/robustness.sh): network storage that never lets a
# request finish, secrets in URLs, nfs:// URLs.
#  - HTTP/S3 servers that send a byte a second: --runtime still ends `bench storage` (Ctrl-C
#    while such servers never let a request finish: robustness/interrupts.sh).
#  - A password in a URL (http://user:pass@host/...), a presigned URL's signature: in no output
#    (stdout, stderr, --json, --output json), whether the run succeeds, fails or is interrupted;
#    and the credentials are really sent (a server that wants them serves the data).
#  - nfs:// URLs: a port after the host, bad or unknown query parameters, credentials: exit 2 with
#    a message saying what to write.
# Builds without libcurl / libnfs skip their part (FEEDLINE_TEST_HAVE_HTTP / _NFS, set by ctest).

net=$scratch/network
mkdir -p "$net"
# The test servers and no_secret(): robustness/net_servers.sh (the interrupts section uses them too).
# shellcheck source=/dev/null
source "$here/robustness/net_servers.sh"

# --- HTTP and S3 -------------------------------------------------------------------------------
if [[ ${FEEDLINE_TEST_HAVE_HTTP:-0} != 1 ]]; then
  echo "skip: HTTP/S3 cases: this feedline was built without the HTTP object-store backend"
else

  # Secrets: a password in the URL, a presigned URL's signature and credential.
  net_secrets=("hunter2pass" "S3cr3t@Pw" "S3cr3t%40Pw" "Wr0ngPw99" "deadbeefsig0123" "AKIAROBUSTCRED" "robustness-secret-key")
  closed=$(net_closed_port)
  expect_fail "password in the URL, server down, run" 1 "127.0.0.1:$closed" \
    -- run "http://user:hunter2pass@127.0.0.1:$closed/x/{0..3}.bin" --max-attempts 1 --json "$net/pw-run.json"
  no_secret "password in the URL, server down, run" "$out" "$err" "$net/pw-run.json"
  expect_fail "password in the URL, server down, bench --output json" 1 "127.0.0.1:$closed" \
    -- bench storage "http://user:hunter2pass@127.0.0.1:$closed/x.bin" --max-attempts 1 --output json
  no_secret "password in the URL, server down, bench --output json" "$out" "$err"
  expect_fail "presigned URL, server down, bench" 1 "127.0.0.1:$closed" \
    -- bench storage "http://127.0.0.1:$closed/x.bin?X-Amz-Credential=AKIAROBUSTCRED&X-Amz-Signature=deadbeefsig0123" \
    --max-attempts 1 --output json
  no_secret "presigned URL, server down, bench" "$out" "$err"
  expect_usage "credentials in an s3:// URL" "s3://" "not credentials" -- bench storage "s3://AKIA:hunter2pass@bucket/k.bin"
  no_secret "credentials in an s3:// URL" "$out" "$err"
  expect_usage "password in a URL of an unknown scheme" "unknown URL scheme" -- run "ftp://user:hunter2pass@127.0.0.1/x"
  no_secret "password in a URL of an unknown scheme" "$out" "$err"
  # A server that wants the password: the right one reads every byte (so it was sent), in text
  # and JSON reports without it; a wrong one is a 401 that does not show it.
  net_server auth auth reader 'S3cr3t@Pw' 100000
  auth=http://127.0.0.1:$net_port
  must_run "password in the URL, served" run "http://reader:S3cr3t%40Pw@127.0.0.1:$net_port/d/{0..3}.bin" --format files \
    --json "$net/pw-ok.json" && {
    checks=$((checks + 1))
    v=$(json_check "$net/pw-ok.json" "d['delivered']['samples'] == 4 and d['bytes'] == 400000 and d['io']['errors'] == 0" \
      "the run through Basic authentication did not deliver 4 samples of 100000 bytes")
    [[ -z $v ]] && echo "ok: password in the URL: sent as Basic authentication, 4 samples read" || fail "$v"
  }
  no_secret "password in the URL, served, run" "$out" "$err" "$net/pw-ok.json"
  must_run "password in the URL, served, bench --output json" bench storage "http://reader:S3cr3t%40Pw@127.0.0.1:$net_port/big.bin" \
    --rw read --bs 16k --output json
  no_secret "password in the URL, served, bench --output json" "$out" "$err"
  expect_fail "wrong password in the URL" 1 "401" "127.0.0.1:$net_port" \
    -- run "http://reader:Wr0ngPw99@127.0.0.1:$net_port/d/{0..3}.bin" --format files --json "$net/pw-wrong.json"
  no_secret "wrong password in the URL" "$out" "$err" "$net/pw-wrong.json"
  expect_fail "no password for a server that wants one" 1 "401" -- bench storage "$auth/big.bin" --output json

  # --- servers whose answers are wrong -------------------------------------------------------------
  # A 206 for other bytes than asked, truthfully labelled (bytes=a-b answered with a+1..b+1): a
  # data error naming the object and the range (it was exit 0 with a wrong digest).
  net_server shifted shifted 1000000
  shifted=http://127.0.0.1:$net_port
  expect_fail "206 of other bytes than asked, bench storage" 1 "$shifted/x.bin" "bytes 0-4095" "bytes 1-4096" \
    -- bench storage "$shifted/x.bin" --bs 4k --size 64k --iodepth 1
  expect_fail "206 of other bytes than asked, run of files" 1 "$shifted/d/" "re:bytes 0-[0-9]+ with bytes 1-" \
    -- run "$shifted/d/{0..3}.bin" --format files
  export AWS_ACCESS_KEY_ID=AKIDROBUSTNESS AWS_SECRET_ACCESS_KEY=robustness-secret-key AWS_REGION=us-east-1
  expect_fail "206 of other bytes than asked, s3 bench storage" 1 "s3://b/x.bin" "bytes 0-4095" \
    -- bench storage "s3://b/x.bin" --endpoint "$shifted" --bs 4k --size 64k --iodepth 1
  unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION

  # A server fault is exit 1 wherever it shows (it was 2 for a tar index or a bench read and 1 for
  # files when Range was ignored; 2 for a redirect on a listing, 1 on an object), and a redirect
  # says where it points (not "the bucket is in another region"), without the signature in it.
  net_secrets=("deadbeefsig0123" "robustness-secret-key")
  net_server norange norange 1000000
  norange=http://127.0.0.1:$net_port
  expect_fail "server ignores Range, bench storage" 1 "ignored the Range header" "$norange/x.bin" \
    -- bench storage "$norange/x.bin" --bs 4k --size 64k
  must_gen "$net/tards" --format tar --samples 64 --sample-size 64KiB --samples-per-shard 32
  net_server norange-tar norange "$net/tards"
  expect_fail "server ignores Range, run of indexed tar shards" 1 "ignored the Range header" \
    "127.0.0.1:$net_port/shard-000000.tar" -- run "http://127.0.0.1:$net_port/shard-{000000..000001}.tar"
  expect_fail "server ignores Range, run of tar shards, scanned" 1 "ignored the Range header" \
    -- run "http://127.0.0.1:$net_port/shard-{000000..000001}.tar" --no-index
  must_run "server ignores Range, run of whole files" run "http://127.0.0.1:$net_port/shard-{000000..000001}.tar" \
    --format files
  net_server redirect redirect
  redirect=http://127.0.0.1:$net_port
  net_server e500 e500
  e500=http://127.0.0.1:$net_port
  export AWS_ACCESS_KEY_ID=AKIDROBUSTNESS AWS_SECRET_ACCESS_KEY=robustness-secret-key AWS_REGION=us-east-1
  for fault in redirect e500; do
    base=$redirect needle="a redirect to http://elsewhere.example:8080/new/path?X-Amz-Signature=***"
    [[ $fault == e500 ]] && base=$e500 needle="HTTP 500"
    expect_fail "$fault: bench storage (HEAD)" 1 "$base/x.bin" "$needle" -- bench storage "$base/x.bin" --max-attempts 2
    no_secret "$fault: bench storage (HEAD)" "$out" "$err"
    if [[ $fault == redirect ]]; then
      checks=$((checks + 1))
      if grep -q "another region" "$err"; then fail "redirect from plain HTTP: the message speaks of regions"; else echo "ok: a redirect's message says where it points, not 'another region'"; fi
    fi
    expect_fail "$fault: run of files" 1 "$base/d/" "$needle" -- run "$base/d/{0..3}.bin" --format files --max-attempts 2
    expect_fail "$fault: run of tar shards" 1 "$base/d/" "$needle" -- run "$base/d/{0..3}.tar" --max-attempts 2
    expect_fail "$fault: run of a directory listing" 1 "$base/d/" "$needle" -- run "$base/d/" --max-attempts 2
    expect_fail "$fault: run of an S3 listing" 1 "s3://b/p/" "$needle" -- run "s3://b/p/" --endpoint "$base" --max-attempts 2
    no_secret "$fault: run of an S3 listing" "$out" "$err"
    expect_fail "$fault: s3 bench storage (HEAD)" 1 "s3://b/x.bin" "$needle" \
      -- bench storage "s3://b/x.bin" --endpoint "$base" --max-attempts 2
  done
  unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION

  # A body longer than its Content-Length: said so (it was "Received HTTP/0.9"), exit 1.
  net_server overlong overlong 1000000
  expect_fail "body longer than its Content-Length" 1 "more bytes than its Content-Length" "127.0.0.1:$net_port/x.bin" \
    -- bench storage "http://127.0.0.1:$net_port/x.bin" --bs 4k --size 64k --iodepth 1
  # Errors name objects by URL, scheme and host included (the path alone before).
  expect_usage "an object smaller than a block, named by its URL" "$shifted/x.bin" \
    -- bench storage "$shifted/x.bin" --bs 2M

  # --runtime bounds bench storage against a slow server: the reads in flight at the deadline get
  # a second, then are cancelled (it ran 30 s and more); a Retry-After of a year is waited at most
  # the stall timeout. (Ctrl-C after the deadline: robustness/interrupts.sh.)
  net_server trickle trickle $((64 << 20))
  trickle=http://127.0.0.1:$net_port
  checks=$((checks + 1))
  t0=$(now_ms)
  run bench storage "$trickle/big.bin" --runtime 1s --time-based
  took=$(($(now_ms) - t0))
  bad=()
  ((rc == 0)) || bad+=("exit code $rc, expected 0")
  ((took <= 5000)) || bad+=("took $took ms for a --runtime of 1 s")
  check_no_crash "$out" "$err"
  conclude "bench storage --runtime 1s against a server that sends 1 byte per s" \
    "bench storage --runtime 1s, 1 byte/s server: exit 0 after $took ms" stderr "$err" stdout "$out" || true
  net_server retryafter retryafter 1000000 31536000
  retryafter=http://127.0.0.1:$net_port
  checks=$((checks + 1))
  t0=$(now_ms)
  run bench storage "$retryafter/x.bin" --runtime 2s --time-based --bs 4k
  took=$(($(now_ms) - t0))
  bad=()
  ((rc == 0)) || bad+=("exit code $rc, expected 0")
  ((took <= 6000)) || bad+=("took $took ms for a --runtime of 2 s")
  grep -q "cut at the runtime: [1-9][0-9]* read(s)" "$out" || bad+=("the report does not say reads were cut at the runtime")
  check_no_crash "$out" "$err"
  conclude "bench storage --runtime 2s against 503 with Retry-After: a year" \
    "bench storage --runtime 2s, 503 Retry-After a year: exit 0 after $took ms" stderr "$err" stdout "$out" || true
  # The same server under `run --runtime`: no batch can come in the time; the run ends on time
  # and says why (the throttled answers counted, the verdict naming the server's refusal; it
  # said "0 retries" and "see the run's error" with no error).
  checks=$((checks + 1))
  t0=$(now_ms)
  run run "$retryafter/x.bin" --runtime 2s --format files --json "$net/throttled.json"
  took=$(($(now_ms) - t0))
  bad=()
  ((rc == 0)) || bad+=("exit code $rc, expected 0 (a time-bounded run, as bench storage's)")
  ((took <= 6000)) || bad+=("took $took ms for a --runtime of 2 s")
  v=$(json_check "$net/throttled.json" "(d['delivered']['samples'] == 0
and d['io']['counters'].get('http_throttled', 0) >= 1 and d['io']['counters'].get('http_retries', 0) >= 1
and 'throttled' in d['bottleneck']['evidence'] and 'error' not in d['bottleneck']['suggestion'])" \
    "the report hides the throttling")
  [[ -z $v ]] || bad+=("$v")
  check_no_crash "$out" "$err"
  conclude "run --runtime 2s against 503 with Retry-After: a year" \
    "run --runtime 2s, 503 Retry-After a year: exit 0 after $took ms, the throttling reported" \
    stderr "$err" stdout "$out" || true
  expect_fail "503 with Retry-After a year, --stall-timeout 1s" 1 "HTTP 503 after 2 attempts" \
    -- bench storage "$retryafter/x.bin" --max-attempts 2 --stall-timeout 1s --bs 4k

  # S3 listings: a key with '..' segments (it became a signed GET /etc/passwd), keys outside the
  # prefix (delivered before), a key twice (delivered twice): the keys inside the prefix are read
  # once each, the rest left out with a note, and no request leaves the bucket's prefix.
  export AWS_ACCESS_KEY_ID=AKIDROBUSTNESS AWS_SECRET_ACCESS_KEY=robustness-secret-key AWS_REGION=us-east-1
  net_server s3-hostile s3 hostile
  s3log=$net/s3-hostile.port.log
  must_run "S3 listing with keys outside the prefix" run "s3://b/p/" --endpoint "http://127.0.0.1:$net_port" \
    --format files --json "$net/s3-hostile.json" && {
    checks=$((checks + 1))
    v=$(json_check "$net/s3-hostile.json" "d['delivered']['samples'] == 2 and d['dataset']['samples'] == 2" \
      "the listing's two keys inside the prefix were not delivered once each")
    [[ -z $v ]] && echo "ok: S3 listing: p/a.bin (listed twice) and p/b.bin delivered once each" || fail "$v"
    checks=$((checks + 1))
    if grep -q "note: left out 2 key(s) the listing gave outside s3://b/p/" "$err"; then
      echo "ok: S3 listing: a note names the keys left out"
    else
      fail "S3 listing: no note on the keys left out"; show stderr "$err"
    fi
    checks=$((checks + 1))
    if grep -Ev '^(GET /b/\?list-type=2|GET /b/p/[ab]\.bin|HEAD /b/p/[ab]\.bin)' "$s3log" | grep -q .; then
      fail "S3 listing: requests outside the prefix's keys: $(grep -Ev '^(GET /b/\?list-type=2|GET /b/p/[ab]\.bin|HEAD /b/p/[ab]\.bin)' "$s3log" | tr '\n' ' ')"
    else
      echo "ok: S3 listing: no request for /etc/passwd or q/outside.bin"
    fi
  }
  # A continuation token that repeats: an error naming the bucket and prefix (it asked for ever).
  net_server s3-loop s3 loop
  expect_fail "S3 listing repeats its continuation token" 1 "s3://b/p/" "round in circles" \
    -- run "s3://b/p/" --endpoint "http://127.0.0.1:$net_port"
  checks=$((checks + 1))
  n=$(grep -c "list-type=2" "$net/s3-loop.port.log" || true)
  ((n <= 5)) && echo "ok: S3 listing that repeats its token: $n requests" || fail "S3 listing that repeats its token: $n requests"
  # A listing's memory is reported (outside --memory-budget, in the JSON report also when the run
  # fails): 20,000 keys, whose objects are not there (the reads fail at once, exit 1).
  net_server s3-pages s3 pages:20
  bounded "S3 listing of 20,000 keys, memory" 1 64 "404" \
    -- run "s3://b/p/" --endpoint "http://127.0.0.1:$net_port" --format files --memory-budget 64MiB \
    --max-attempts 1 --json "$net/s3-pages.json"
  checks=$((checks + 1))
  v=$(json_check "$net/s3-pages.json" \
    "d['dataset']['samples'] == 20000 and 1e6 < d['dataset']['listing_bytes'] < 50e6" \
    "the JSON report does not give the listing's memory (dataset.listing_bytes) of 20,000 keys")
  [[ -z $v ]] && echo "ok: S3 listing of 20,000 keys: dataset.listing_bytes $(json_get "$net/s3-pages.json" "d['dataset']['listing_bytes']")" || fail "$v"
  unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION
fi

# --- NFS ---------------------------------------------------------------------------------------
if [[ ${FEEDLINE_TEST_HAVE_NFS:-0} != 1 ]]; then
  echo "skip: nfs:// cases: this feedline was built without the NFS backend"
else
  expect_usage "nfs:// with a port after the host" "nfs://127.0.0.1:1/x" "the port belongs in ?nfsport=1" \
    "write nfs://127.0.0.1/x?nfsport=1" -- bench storage "nfs://127.0.0.1:1/x"
  expect_usage "nfs:// with a port after the host, run" "the port belongs in ?nfsport=2049" \
    -- run "nfs://127.0.0.1:2049/export/ds/?version=4"
  expect_usage "nfsport that is no number" "nfsport must be a number" "'abc'" \
    -- run "nfs://127.0.0.1/export/x?nfsport=abc"
  expect_usage "nfsport out of range" "nfsport must be a number from 1 to 65535" \
    -- bench storage "nfs://127.0.0.1/export/x?version=4&nfsport=70000"
  expect_usage "nfs version 5" "version must be 3 or 4" -- bench storage "nfs://127.0.0.1/export/x?version=5"
  expect_usage "nfs uid that is no number" "uid must be a number" -- run "nfs://127.0.0.1/export/x?uid=root"
  expect_usage "unknown nfs parameter" "unknown parameter 'verison'" "known: version, nfsport, mountport, uid, gid" \
    -- run "nfs://127.0.0.1/export/x?verison=4"
  expect_usage "nfs parameter given twice" "nfsport is given twice" \
    -- run "nfs://127.0.0.1/export/x?nfsport=1&nfsport=2"
  net_secrets=("hunter2nfs")
  expect_usage "credentials in an nfs:// URL" "no user name or password" -- run "nfs://root:hunter2nfs@127.0.0.1/export/x"
  no_secret "credentials in an nfs:// URL" "$out" "$err"
fi

for p in "${net_pids[@]}"; do kill "$p" 2>/dev/null || true; done
for p in "${net_pids[@]}"; do wait "$p" 2>/dev/null || true; done
net_pids=()
