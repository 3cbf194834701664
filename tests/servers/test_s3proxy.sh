#!/usr/bin/env bash
# Self-test of the test servers and of s3proxy.py: s3rver and nginx start and stop; through the
# proxy, requests signed by botocore and by Debian's aws-cli verify, a wrong secret and a tampered
# request are refused with S3's 403 XML, and each fault mode does what it says (checked with curl).
# Usage: tests/servers/test_s3proxy.sh [SCRATCH_DIR]     (needs tests/servers/setup.sh first)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/servers.sh"
servers_cleanup_on_exit
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/s3proxy-test.XXXXXX")}
rm -rf -- "$work"; mkdir -p "$work"
failures=0
checks=0
ok() { checks=$((checks + 1)); echo "ok: $*"; }
bad() { checks=$((checks + 1)); failures=$((failures + 1)); echo "FAIL: $*"; }
stat_of() { "$servers_py" -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): d = d.get(k, 0) if isinstance(d, dict) else 0
print(d)' "$1" "$2"; }

s3port=$(free_port); start_s3rver "$work/s3data" "$s3port" || exit 1
ngport=$(free_port); mkdir -p "$work/www"
head -c 3000000 /dev/urandom >"$work/www/big.bin"
start_nginx "$work/www" "$ngport" || exit 1
# s3rver knows only the access key S3RVER (it checks no V4 signature: the proxy does).
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=proxy-secret-xyz-123
s3_env "$s3port"
secret=$AWS_SECRET_ACCESS_KEY
vport=$(free_port)
start_s3proxy "$s3port" "$vport" --verify-sigv4 "$AWS_ACCESS_KEY_ID:$secret" --require-auth --stats "$work/verify.json" || exit 1
s3_endpoint=http://127.0.0.1:$vport

# aws-cli through the verifying proxy: mb, cp up (small and multipart), ls with a prefix, cp down.
head -c 12000000 /dev/urandom >"$work/multi.bin"
printf 'hello' >"$work/small.txt"
if awscli s3 mb s3://bench >"$work/o" 2>&1 &&
   awscli s3 cp "$work/small.txt" "s3://bench/dir/a b+c.txt" >>"$work/o" 2>&1 &&
   awscli s3 cp "$work/multi.bin" s3://bench/dir/multi.bin >>"$work/o" 2>&1 &&
   awscli s3 ls s3://bench/dir/ >"$work/ls" 2>>"$work/o" &&
   awscli s3 cp s3://bench/dir/multi.bin "$work/multi.back" >>"$work/o" 2>&1 &&
   cmp -s "$work/multi.bin" "$work/multi.back" && grep -q "a b+c.txt" "$work/ls"; then
  ok "aws-cli mb/cp/ls/cp through the verifying proxy"
else
  bad "aws-cli through the verifying proxy"; sed 's/^/    | /' "$work/o"
fi
v=$(stat_of "$work/verify.json" sigv4.verified); f=$(stat_of "$work/verify.json" sigv4.failed)
if ((v >= 5 && f == 0)); then ok "aws-cli: $v requests verified, $f failed"; else bad "aws-cli: $v verified, $f failed"; cat "$work/verify.json"; fi

# boto3 (botocore's own signer) with a listing (list-type=2&prefix=...), hashed and unsigned payloads.
if "$servers_py" - "$s3_endpoint" >"$work/boto.out" 2>&1 <<'PY'
import sys, boto3, botocore.config
ep = sys.argv[1]
for signed in (True, False):
    cfg = botocore.config.Config(s3={"addressing_style": "path", "payload_signing_enabled": signed}, retries={"max_attempts": 1})
    c = boto3.client("s3", endpoint_url=ep, config=cfg)
    c.put_object(Bucket="bench", Key="boto/x=1&y/%d.bin" % signed, Body=b"abc" * 1000)
    r = c.list_objects_v2(Bucket="bench", Prefix="boto/x=1&y/", MaxKeys=1)
    assert r["KeyCount"] == 1, r
    r2 = c.list_objects_v2(Bucket="bench", Prefix="boto/", ContinuationToken=r.get("NextContinuationToken", "x"), MaxKeys=1) if r.get("IsTruncated") else r
    assert c.get_object(Bucket="bench", Key="dir/a b+c.txt", Range="bytes=1-3")["Body"].read() == b"ell"
print("ok")
PY
then ok "boto3 put/list (prefix, continuation token)/ranged get through the verifying proxy"
else bad "boto3 through the verifying proxy"; sed 's/^/    | /' "$work/boto.out"; fi

# curl --aws-sigv4 (libcurl's signer, which feedline uses). curl 7.88 does not add the
# x-amz-content-sha256 header S3 requires: given one, it signs it.
code=$(curl -s -o "$work/curl.body" -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" \
  -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
  --user "$AWS_ACCESS_KEY_ID:$secret" "$s3_endpoint/bench/dir/multi.bin" -r 0-99)
if [[ $code == 206 ]] && cmp -s <(head -c 100 "$work/multi.bin") "$work/curl.body"; then
  ok "curl --aws-sigv4 ranged GET verified (206)"
else bad "curl --aws-sigv4: HTTP $code"; head -c 400 "$work/curl.body"; echo; fi
code=$(curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" \
  -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" --user "$AWS_ACCESS_KEY_ID:$secret" "$s3_endpoint/bench?list-type=2&max-keys=1&prefix=dir%2F")
[[ $code == 200 ]] && ok "curl --aws-sigv4 ListObjectsV2 with a sorted, encoded query verified" || bad "curl list: HTTP $code"
# curl 7.88 signs the query string as given: unsorted, or with an unencoded '/', AWS (and the proxy) refuse it.
for q in "max-keys=1&list-type=2&prefix=dir%2F" "list-type=2&max-keys=1&prefix=dir/"; do
  code=$(curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" --user \
    "$AWS_ACCESS_KEY_ID:$secret" "$s3_endpoint/bench?$q")
  [[ $code == 403 ]] && ok "curl 7.88 signing '$q' as given is refused, as AWS does" || bad "query '$q': HTTP $code (expected 403)"
done
code=$(curl -s -o "$work/nosha" -w '%{http_code}' --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$secret" "$s3_endpoint/bench/dir/multi.bin")
[[ $code == 403 ]] && grep -q x-amz-content-sha256 "$work/nosha" && ok "no x-amz-content-sha256: refused as S3 does" || bad "no x-amz-content-sha256: HTTP $code"

# Refusals: a wrong secret (aws-cli), an unknown key, no signature, a tampered request.
before=$(stat_of "$work/verify.json" sigv4.failed)
if AWS_SECRET_ACCESS_KEY=wrong-secret /usr/bin/aws --endpoint-url "$s3_endpoint" s3 ls s3://bench/ >"$work/o" 2>&1; then
  bad "aws-cli with a wrong secret was accepted"
elif grep -q SignatureDoesNotMatch "$work/o"; then ok "aws-cli with a wrong secret: SignatureDoesNotMatch"
else bad "aws-cli with a wrong secret: unexpected output"; sed 's/^/    | /' "$work/o"; fi
AWS_ACCESS_KEY_ID=AKIDOTHER /usr/bin/aws --endpoint-url "$s3_endpoint" s3 ls s3://bench/ >"$work/o" 2>&1
grep -q InvalidAccessKeyId "$work/o" && ok "unknown access key: InvalidAccessKeyId" || { bad "unknown access key"; cat "$work/o"; }
code=$(curl -s -o "$work/anon" -w '%{http_code}' "$s3_endpoint/bench/dir/multi.bin")
[[ $code == 403 ]] && grep -q AccessDenied "$work/anon" && ok "unsigned request refused (403 AccessDenied)" || bad "unsigned: HTTP $code"
# Tampered: a valid signature for one range, sent with another.
"$servers_py" - "$s3_endpoint" "$AWS_ACCESS_KEY_ID" "$secret" >"$work/tamper" 2>&1 <<'PY'
import sys, urllib.request, botocore.auth, botocore.awsrequest, botocore.credentials
ep, key, secret = sys.argv[1:4]
r = botocore.awsrequest.AWSRequest("GET", ep + "/bench/dir/multi.bin", headers={"Range": "bytes=0-9"})
botocore.auth.S3SigV4Auth(botocore.credentials.Credentials(key, secret), "s3", "us-east-1").add_auth(r)
h = dict(r.headers.items())
ok = urllib.request.urlopen(urllib.request.Request(r.url, headers=h)).status
h["Range"] = "bytes=0-19"
try:
    urllib.request.urlopen(urllib.request.Request(r.url, headers=h)); print("accepted", ok)
except urllib.error.HTTPError as e:
    print(ok, e.code, e.read().decode())
PY
grep -q "^206 403 " "$work/tamper" && grep -q SignatureDoesNotMatch "$work/tamper" && ok "botocore-signed GET verified; the same with a changed Range refused" ||
  { bad "tampered request"; cat "$work/tamper"; }
after=$(stat_of "$work/verify.json" sigv4.failed)
((after - before >= 3)) && ok "stats count the failures ($((after - before)))" || bad "stats: failed went $before -> $after"
if grep -rqF -- "$secret" "$servers_dir" "$work/verify.json"; then bad "the secret appears in the proxy's log or stats"; else ok "the secret is in no log or stats file"; fi

# Faults, against nginx (3,000,000-byte file).
fault_case() {  # NAME CHECK_CMD -- PROXY_OPTIONS...
  local name=$1 port; shift
  port=$(free_port)
  start_s3proxy "$ngport" "$port" "$@" --stats "$work/$name.json" || { bad "$name: proxy did not start"; return; }
  fport=$port
}
fault_case f503 --fail-503 2:3
codes=""
for i in 1 2 3 4 5 6 7; do codes+=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$fport/big.bin" -r 0-9)" "; done
[[ $codes == "206 206 503 503 503 206 206 " ]] && ok "--fail-503 2:3: $codes" || bad "--fail-503 2:3 gave: $codes"
[[ $(stat_of "$work/f503.json" faults.fail_503) == 3 ]] && ok "--fail-503 counted" || bad "--fail-503 count"

fault_case reset --reset-mid-body every:2 --seed 4
curl -s -o "$work/r1" "http://127.0.0.1:$fport/big.bin"; r1=$?
curl -s -o "$work/r2" "http://127.0.0.1:$fport/big.bin"; r2=$?
sz=$(stat -c %s "$work/r2")
if ((r1 == 0)) && cmp -s "$work/r1" "$work/www/big.bin" && ((r2 == 56 || r2 == 18)) && ((sz < 3000000)); then
  ok "--reset-mid-body every:2: 1st whole, 2nd cut at $sz bytes (curl exit $r2)"
else bad "--reset-mid-body: curl exits $r1 $r2, second body $sz bytes"; fi

fault_case trunc --truncate 1
curl -s -o "$work/t1" "http://127.0.0.1:$fport/big.bin"; t1=$?
sz=$(stat -c %s "$work/t1")
((t1 == 18 && sz == 1500000)) && ok "--truncate 1: curl exit 18, 1,500,000 of 3,000,000 bytes" || bad "--truncate: curl exit $t1, $sz bytes"

fault_case slow --slow-first-byte 700:1
t=$(curl -s -o /dev/null -w '%{time_starttransfer}' "http://127.0.0.1:$fport/big.bin" -r 0-9)
"$servers_py" -c "import sys; sys.exit(0 if float('$t') >= 0.7 else 1)" && ok "--slow-first-byte 700:1: first byte after ${t}s" || bad "--slow-first-byte: ${t}s"

fault_case norange --no-range
code=$(curl -s -o "$work/nr" -w '%{http_code}' "http://127.0.0.1:$fport/big.bin" -r 0-9)
[[ $code == 200 && $(stat -c %s "$work/nr") == 3000000 ]] && ok "--no-range: 200 with the whole body" || bad "--no-range: HTTP $code"

# Probabilistic faults are deterministic for a seed.
seq_of() {  # SEED NAME: sets seq to curl's exit codes for 20 requests (not in a subshell: the proxy's pid is recorded here)
  local port; port=$(free_port)
  seq=""
  start_s3proxy "$ngport" "$port" --truncate 0.3 --seed "$1" --stats "$work/seq$1-$2.json" >/dev/null || return
  local n
  for ((n = 0; n < 20; n++)); do curl -s -o /dev/null "http://127.0.0.1:$port/big.bin" -r 0-999; seq+=$?; done
}
seq_of 7 a; a=$seq; seq_of 7 b; b=$seq; seq_of 8 c; c=$seq
[[ $a == "$b" && $a == *18* && $a == *0* ]] && ok "--seed 7 gives the same faults twice ($a)" || bad "seeded faults: $a vs $b"
[[ $a != "$c" ]] && ok "another seed gives other faults" || echo "note: seeds 7 and 8 gave the same sequence"

pids=("${servers_pids[@]}")
stop_servers
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && bad "server pid $p still running after stop_servers"; done
((failures == 0)) && { echo "test_s3proxy: all $checks checks passed"; rm -rf -- "$work"; exit 0; }
echo "test_s3proxy: $failures of $checks checks FAILED (scratch $work)"; exit 1
