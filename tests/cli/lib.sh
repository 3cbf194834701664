# shellcheck shell=bash
# Helpers shared by the CLI tests (tests/cli/*.sh), which source this file:
#   source "$(dirname "$0")/lib.sh"
# It defines functions and a few variables only; each test calls cli_init "$@" first.
#
# Variables a test reads:        bin scratch mode py crash_markers out err rc failures checks
# Variables a test may set:      run_timeout (seconds, for run/expect_fail; default 60)
#                                show_max_lines (lines of a file `show` prints; 0: all; default 40)

py=/usr/bin/python3
crash_markers='Segmentation|terminate called|AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error|core dumped|Aborted|internal error'
run_timeout=60
show_max_lines=40
failures=0
checks=0
skipped=0
rc=0
out=""
err=""

# cli_init "$@": the arguments every test takes, FEEDLINE_BINARY SCRATCH_DIR [uring|nouring].
# Sets bin (absolute), mode (default uring) and scratch (wiped, recreated, absolute); out and err
# are the capture files of `run` in the scratch directory.
cli_init() {
  if (($# < 2)); then
    echo "usage: $0 FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]" >&2
    exit 2
  fi
  bin=$(realpath -- "$1")
  mode=${3:-uring}
  require_executable "$bin"
  [[ $mode == uring || $mode == nouring ]] || { echo "FAIL: third argument must be uring or nouring, got '$mode'" >&2; exit 1; }
  prepare_scratch "$2"
  out=$scratch/stdout.txt
  err=$scratch/stderr.txt
}

# timing_checks: 0 in a ThreadSanitizer build (FEEDLINE_TEST_SANITIZE=thread, which
# tests/cli/CMakeLists.txt sets for the scripts that ask), 1 otherwise. There every thread runs
# ~10x slower: a check on which stage a planted cost makes the limit, or on a prediction against
# its outcome, is the instrumentation's, and the scripts skip it (saying so).
timing_checks() {
  if [[ ${FEEDLINE_TEST_SANITIZE:-} == thread ]]; then echo 0; else echo 1; fi
}

# require_executable PATH: exit 1 unless PATH is an executable.
require_executable() {
  [[ -x $1 ]] || { echo "FAIL: $1 is not an executable" >&2; exit 1; }
}

# prepare_scratch DIR: wipes and recreates DIR (whose name must start with "scratch", so that a
# wrong argument cannot wipe anything else) and sets scratch to its absolute path.
prepare_scratch() {
  case $(basename -- "$1") in
    scratch*) ;;
    *) echo "refusing to wipe '$1': the scratch directory's name must start with 'scratch'" >&2; exit 2 ;;
  esac
  rm -rf -- "$1"
  mkdir -p -- "$1"
  scratch=$(realpath -- "$1")
}

# require_xxhash: exit 1 unless $py has xxhash with xxh3_64_intdigest.
require_xxhash() {
  if ! "$py" -c 'import xxhash; xxhash.xxh3_64_intdigest(b"")' 2>/dev/null; then
    echo "FAIL: $py cannot import xxhash with xxh3_64_intdigest (install python3-xxhash: scripts/install-deps.sh --test)"
    exit 1
  fi
}

# require_zstd_decoder: exit 1 unless python3-zstandard or the zstd tool is there.
require_zstd_decoder() {
  if ! "$py" -c 'import zstandard' 2>/dev/null && ! command -v zstd >/dev/null; then
    echo "FAIL: neither python3-zstandard nor the zstd tool is installed (scripts/install-deps.sh --test)"
    exit 1
  fi
}

# --- reporting -----------------------------------------------------------------------------------

# fail MESSAGE...: prints a FAIL line and counts the failure.
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# skip MESSAGE: a check that could not be judged here, and why; finish() counts it apart.
skip() {
  echo "skip: $*"
  skipped=$((skipped + 1))
}

# show LABEL FILE: the captured output, indented, for a failure report (the first
# $show_max_lines lines; all of them when that is 0).
show() {
  echo "    $1:"
  if [[ ! -s $2 ]]; then
    echo "      (empty)"
  elif ((show_max_lines > 0)); then
    sed -n "1,${show_max_lines}s/^/      | /p" "$2"
  else
    sed "s/^/      | /" "$2"
  fi
}

# check_no_crash FILE...: appends to the caller's bad[] when a file shows a crash or an internal error.
check_no_crash() {
  if grep -Eq "$crash_markers" "$@"; then bad+=("crash or internal error in the output"); fi
}

# conclude FAIL_MESSAGE OK_MESSAGE [LABEL FILE]...: with problems in the caller's bad[], counts a
# failure (FAIL_MESSAGE, each problem, then `show LABEL FILE` for each pair) and returns 1;
# otherwise prints "ok: OK_MESSAGE".
conclude() {
  local fail_message=$1 ok_message=$2; shift 2
  if ((${#bad[@]} > 0)); then
    fail "$fail_message"
    local b
    for b in "${bad[@]}"; do echo "    - $b"; done
    while (($# >= 2)); do show "$1" "$2"; shift 2; done
    return 1
  fi
  echo "ok: $ok_message"
}

# finish NAME: the summary line; exit 1 when a check failed.
finish() {
  if ((failures > 0)); then
    echo "$1: $failures of $checks checks FAILED"
    exit 1
  fi
  if ((skipped > 0)); then
    echo "$1: $((checks - skipped)) of $checks checks passed, $skipped skipped (the skip: lines)"
  else
    echo "$1: all $checks checks passed"
  fi
}

# --- running the binary --------------------------------------------------------------------------

# run ARGS...: runs the binary under `timeout $run_timeout`, capturing stdout ($out), stderr ($err)
# and the exit code ($rc).
run() { run_as -- "$@"; }

# run_as [PREFIX_CMD...] -- ARGS...: run, with the binary started by PREFIX_CMD (e.g. setpriv ...).
run_as() {
  local prefix=()
  while (($# > 0)) && [[ $1 != -- ]]; do prefix+=("$1"); shift; done
  shift
  rc=0
  timeout "$run_timeout" "${prefix[@]}" "$bin" "$@" >"$out" 2>"$err" || rc=$?
}

# must_run WHAT ARGS...: run, and report a failure (returning 1) unless it exits 0 without a crash.
must_run() {
  local what=$1; shift
  run "$@"
  if ((rc != 0)) || grep -Eq "$crash_markers" "$out" "$err"; then
    fail "$what: feedline ${*@Q}: exit code $rc$( ((rc == 124)) && echo ' (hung: killed by timeout)')"
    show stderr "$err"
    show stdout "$out"
    return 1
  fi
}

# must_gen ARGS...: feedline gen, which must work (the test cannot go on otherwise: exit 1).
must_gen() {
  run gen "$@"
  if ((rc != 0)); then
    echo "FAIL: feedline gen ${*@Q}: exit code $rc"
    show stderr "$err"
    exit 1
  fi
}

# expect_fail NAME WANT_RC [--as PREFIX_CMD... --needles] NEEDLE... -- ARGS...
#   Runs `feedline ARGS...` (under PREFIX_CMD, if given) and checks: exit WANT_RC, exactly one
#   stderr line starting with "feedline: error:", each NEEDLE in that line (a fixed string;
#   "re:REGEX" for an extended regular expression), no crash, no hang; with WANT_RC 2 (usage)
#   also nothing on stdout.
expect_fail() {
  local name=$1 want=$2; shift 2
  local prefix=()
  if [[ ${1:-} == --as ]]; then
    shift
    while [[ $1 != --needles ]]; do prefix+=("$1"); shift; done
    shift
  fi
  local needles=()
  while (($# > 0)) && [[ $1 != -- ]]; do needles+=("$1"); shift; done
  shift
  checks=$((checks + 1))
  run_as "${prefix[@]}" -- "$@"
  local bad=()
  if ((rc == 124)); then
    bad+=("hung: still running after $run_timeout s (killed by timeout)")
  elif ((rc != want)); then
    bad+=("exit code $rc, expected $want")
  fi
  if ((want == 2)) && [[ -s $out ]]; then bad+=("wrote $(wc -c <"$out") bytes to stdout, expected nothing"); fi
  check_no_crash "$out" "$err"
  local lines first
  lines=$(wc -l <"$err")
  first=$(head -n 1 "$err")
  if ((rc != 124)); then
    if [[ ! -s $err ]]; then
      bad+=("nothing on stderr")
    else
      ((lines == 1)) || bad+=("stderr has $lines lines, expected exactly one")
      [[ $first == "feedline: error: "* ]] || bad+=("stderr does not start with 'feedline: error: '")
      local n
      for n in "${needles[@]}"; do
        if [[ $n == re:* ]]; then
          grep -Eq -- "${n#re:}" <<<"$first" || bad+=("error line does not match /${n#re:}/")
        else
          [[ $first == *"$n"* ]] || bad+=("error line does not mention '$n'")
        fi
      done
    fi
  fi
  conclude "$name: feedline ${*@Q}" "$name" stderr "$err" stdout "$out" || true
}
# expect_usage NAME ...: expect_fail NAME 2 ... (a usage error).
expect_usage() { local name=$1; shift; expect_fail "$name" 2 "$@"; }
# expect_runtime NAME ...: expect_fail NAME 1 ... (a runtime error).
expect_runtime() { local name=$1; shift; expect_fail "$name" 1 "$@"; }

# --- JSON reports --------------------------------------------------------------------------------

# json_get FILE EXPR: a value from a JSON file (EXPR in Python over `d`).
json_get() { "$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

# json_check FILE PYTHON_EXPR MESSAGE: prints MESSAGE unless the expression (over the report `d`)
# is true; prints a message of its own when the file is missing, not JSON, or not strict UTF-8
# (decoded first: json.load alone would take surrogate escapes or a replacement character).
json_check() {
  "$py" -c '
import json, sys
try:
    d = json.loads(open(sys.argv[1], "rb").read().decode("utf-8"))
except (OSError, ValueError) as e:
    print("the JSON report is missing, invalid or not strict UTF-8: %s" % e); sys.exit(0)
try:
    ok = eval(sys.argv[2])
except Exception as e:
    ok = False
print("" if ok else sys.argv[3])' "$@"
}

# --- the independent digest ----------------------------------------------------------------------

# write_digest_py FILE: writes the Python digest of a dataset to FILE.
#   python3 FILE ROOT [--skip NAME]... [--skip-key KEY]...: walks ROOT; every *.tar file is read
#   with tarfile (regular members only), every other file except *.idx and hidden files (gen's
#   manifest .feedline-dataset: hidden files are never samples) is one member; ".zst"
#   members are decompressed. Prints "DIGEST MEMBERS DECODED_BYTES": the sum modulo 2^64 of
#   XXH3-64 over every decoded member. --skip leaves out files with that base name; --skip-key
#   leaves out members (tar members and files) whose key (base name up to the first '.') is KEY.
write_digest_py() {
  cat >"$1" <<'EOF'
import os, subprocess, sys, tarfile, xxhash
try:
    import zstandard
except ImportError:
    zstandard = None

def decode(name, data):
    if not name.endswith(".zst"):
        return data
    if zstandard is not None:
        # decompressobj: also frames that do not record their decompressed size
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return subprocess.run(["zstd", "-d", "-c", "-q"], input=data, stdout=subprocess.PIPE, check=True).stdout

root, skip, skip_keys = sys.argv[1], set(), set()
args = sys.argv[2:]
while args:
    if args[0] == "--skip" and len(args) > 1:
        skip.add(args[1]); args = args[2:]
    elif args[0] == "--skip-key" and len(args) > 1:
        skip_keys.add(args[1]); args = args[2:]
    else:
        sys.exit("digest.py: unknown argument %r" % args[0])
total = members = decoded = 0
def add(name, data):
    global total, members, decoded
    if os.path.basename(name).split(".", 1)[0] in skip_keys:
        return
    d = decode(name, data)
    total = (total + xxhash.xxh3_64_intdigest(d)) % 2**64
    members += 1
    decoded += len(d)
for dirpath, dirnames, filenames in os.walk(root):
    for f in sorted(filenames):
        path = os.path.join(dirpath, f)
        if f in skip or f.endswith(".idx") or f.startswith("."):
            continue
        if f.endswith(".tar"):
            with tarfile.open(path, "r:") as t:
                for m in t:
                    if m.isreg():
                        add(m.name, t.extractfile(m).read())
        else:
            with open(path, "rb") as fh:
                add(f, fh.read())
print(total, members, decoded)
EOF
}

# --- Ctrl-C --------------------------------------------------------------------------------------

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# A background job of a non-interactive shell starts with SIGINT ignored; a program run from a
# terminal starts with the default action. "${as_terminal[@]}" CMD... restores that, so the runs
# see what a Ctrl-C user sees.
# shellcheck disable=SC2034  # used by the tests that source this file
as_terminal=("$py" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])')

# started PID SECONDS: sleeps SECONDS; true while PID still runs then. Otherwise reaps it, sets
# early to its exit code and returns 1.
# shellcheck disable=SC2034  # early is read by the caller
started() {
  sleep "$2"
  kill -0 "$1" 2>/dev/null && return 0
  early=0
  wait "$1" || early=$?
  return 1
}

# interrupt_pid PID: sends SIGINT, waits for the exit (SIGKILL after 10 s); sets elapsed
# (ms from the signal to the exit), exit_rc, and appends to bad[] when it took more than 10 s.
interrupt_pid() {
  local pid=$1
  local t0
  t0=$(now_ms)
  kill -INT "$pid"
  # Poll for the exit (bash reaps the child as it ends); give up and SIGKILL after 10 s.
  while kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo gone) != Z ]]; do
    if (($(now_ms) - t0 > 10000)); then
      bad+=("still running 10 s after SIGINT: killed with SIGKILL")
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.01
  done
  elapsed=$(($(now_ms) - t0))
  exit_rc=0
  wait "$pid" || exit_rc=$?
}

# check_sigint_exit FILE...: after interrupt_pid, appends to bad[] unless the exit came within
# 1000 ms, with code 130, and FILES show no crash.
check_sigint_exit() {
  ((elapsed <= 1000)) || bad+=("took ${elapsed} ms to exit after SIGINT, expected at most 1000 ms")
  ((exit_rc == 130)) || bad+=("exit code $exit_rc, expected 130")
  check_no_crash "$@"
}
