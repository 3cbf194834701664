# shellcheck shell=bash
# The variables of tests/cli/lib.sh and tests/servers/servers.sh are set there:
# shellcheck disable=SC2154
# Helpers shared by the S3/HTTP CLI tests (s3_protocol.sh, http_faults.sh, http_nginx.sh), which
# source tests/cli/lib.sh, then this file, then tests/servers/servers.sh.
# Variables a test may set: secrets (strings that must appear in no output: checked by
# expect_net_error on each error line and by check_no_secrets over every file in the scratch
# directory and every captured output).

secrets=()

# net_test_start FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]: the start of every network CLI test
# (after sourcing lib.sh, this file and servers.sh): arguments, servers stopped on exit, and exit 1
# unless the test tools and feedline's HTTP backend are there.
net_test_start() {
  cli_init "$@"
  servers_cleanup_on_exit
  require_net_tools
  require_http_backend
}

# require_net_tools: exit 1 unless nginx, Debian's aws-cli and botocore, curl and s3rver are there.
require_net_tools() {
  local missing=()
  command -v nginx >/dev/null || missing+=("nginx")
  [[ -x /usr/bin/aws ]] || missing+=("/usr/bin/aws (Debian's awscli)")
  "$py" -c 'import botocore.auth, boto3' 2>/dev/null || missing+=("python3-botocore/python3-boto3")
  command -v curl >/dev/null || missing+=("curl")
  [[ -f $servers_root/node_modules/s3rver/bin/s3rver.js ]] || missing+=("s3rver (run tests/servers/setup.sh)")
  command -v node >/dev/null || missing+=("node")
  if ((${#missing[@]} > 0)); then
    echo "FAIL: missing test tools: ${missing[*]} (scripts/install-deps.sh --test; tests/servers/setup.sh)"
    exit 1
  fi
}

# require_http_backend: exit 1 when this feedline has no http(s):// / s3:// backend.
require_http_backend() {
  run bench storage "http://127.0.0.1:1/probe.bin" --max-attempts 1 --connect-timeout 1s --output json
  if grep -qi "built without" "$err"; then
    echo "FAIL: this feedline was built without the HTTP object-store backend (FEEDLINE_WITH_HTTP): $(head -n 1 "$err")"
    exit 1
  fi
}

# frun ARGS...: run, keeping every output for check_no_secrets (the command line with each of
# $secrets replaced by ***: a URL with a password in it is an argument, not an output).
frun() {
  run "$@"
  local line="=== feedline ${*@Q} (exit $rc)" s
  for s in "${secrets[@]}"; do line=${line//"$s"/***}; done
  { echo "$line"; cat "$out" "$err"; } >>"$scratch/all-output.txt"
}

# must_frun WHAT ARGS...: frun; a failure (returns 1) unless it exits 0 without a crash.
must_frun() {
  local what=$1; shift
  frun "$@"
  if ((rc != 0)) || grep -Eq "$crash_markers" "$out" "$err"; then
    fail "$what: feedline ${*@Q}: exit code $rc$( ((rc == 124)) && echo ' (hung: killed by timeout)')"
    show stderr "$err"
    show stdout "$out"
    return 1
  fi
}

# expect_net_error NAME MAX_SECONDS NEEDLE... -- ARGS...: `feedline ARGS` must exit 1 or 2 within
# MAX_SECONDS, print exactly one stderr line "feedline: error: ..." that contains every NEEDLE (a
# fixed string, or "re:REGEX", case-insensitive) and none of $secrets, and not crash.
expect_net_error() {
  local name=$1 max=$2; shift 2
  local needles=()
  while (($# > 0)) && [[ $1 != -- ]]; do needles+=("$1"); shift; done
  shift
  checks=$((checks + 1))
  local t0=$SECONDS
  frun "$@"
  local took=$((SECONDS - t0))
  local bad=()
  if ((rc == 124)); then
    bad+=("hung: still running after $run_timeout s (killed by timeout)")
  elif ((rc != 1 && rc != 2)); then
    bad+=("exit code $rc, expected 1 or 2")
  fi
  ((took <= max)) || bad+=("took $took s, expected at most $max s")
  check_no_crash "$out" "$err"
  local first lines
  first=$(head -n 1 "$err")
  lines=$(wc -l <"$err")
  ((lines == 1)) || bad+=("stderr has $lines lines, expected exactly one")
  [[ $first == "feedline: error: "* ]] || bad+=("stderr does not start with 'feedline: error: '")
  local n s
  for n in "${needles[@]}"; do
    if [[ $n == re:* ]]; then
      grep -Eqi -- "${n#re:}" <<<"$first" || bad+=("error line does not match /${n#re:}/")
    else
      grep -Fqi -- "$n" <<<"$first" || bad+=("error line does not mention '$n'")
    fi
  done
  for s in "${secrets[@]}"; do
    if grep -Fq -- "$s" "$out" "$err"; then bad+=("a secret appears in the output"); fi
  done
  conclude "$name: feedline ${*@Q}" "$name (exit $rc, ${took}s): $first" stderr "$err" stdout "$out"
}

# check_no_secrets: no file under $scratch (outputs, JSON reports, datasets read back) and no
# server log holds any of $secrets.
check_no_secrets() {
  checks=$((checks + 1))
  local s hits=()
  for s in "${secrets[@]}"; do
    while IFS= read -r f; do hits+=("$f"); done < <(grep -rlF -- "$s" "$scratch" ${servers_dir:+"$servers_dir"} 2>/dev/null)
  done
  if ((${#hits[@]} > 0)); then
    fail "credentials leaked: a secret appears in ${hits[*]}"
  else
    echo "ok: no secret in any output, report or log ($(find "$scratch" -type f | wc -l) files searched)"
  fi
}

# same_digest NAME WANT_JSON GOT_JSON: the two run reports delivered the same samples and digest.
same_digest() {
  local name=$1 want=$2 got=$3
  checks=$((checks + 1))
  local a b
  a=$(json_get "$want" '"%s %s" % (d["delivered"]["digest"], d["delivered"]["samples"])' 2>/dev/null)
  b=$(json_get "$got" '"%s %s" % (d["delivered"]["digest"], d["delivered"]["samples"])' 2>/dev/null)
  if [[ -z $a || $a != "$b" ]]; then
    fail "$name: digest and samples '$b', expected '$a' (the same run on the local copy)"
    return 1
  fi
  echo "ok: $name: digest and samples match the local run ($a)"
}

# counter JSON NAME: io.counters[NAME] of a run report (0 when absent).
counter() { json_get "$1" "d.get('io', {}).get('counters', {}).get('$2', 0)" 2>/dev/null || echo 0; }
# proxy_stat FILE DOTTED.KEY: a number from s3proxy.py's stats file (0 when absent).
proxy_stat() {
  "$py" -c 'import json,sys
d = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): d = d.get(k, 0) if isinstance(d, dict) else 0
print(d)' "$1" "$2" 2>/dev/null || echo 0
}

# py_digest ROOT: sets want_digest, want_members, want_bytes: the Python digest of a local dataset
# (write_digest_py "$scratch/digest.py" first).
py_digest() {
  local line
  if ! line=$("$py" "$scratch/digest.py" "$@" 2>"$scratch/digest.err"); then
    echo "FAIL: the Python digest of $1 failed"
    show stderr "$scratch/digest.err"
    exit 1
  fi
  read -r want_digest want_members want_bytes <<<"$line"
}
# times N DIGEST: N x DIGEST mod 2^64.
times() { "$py" -c 'import sys; print(int(sys.argv[1]) * int(sys.argv[2]) % 2**64)' "$1" "$2"; }
