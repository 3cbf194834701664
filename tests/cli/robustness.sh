#!/usr/bin/env bash
# CLI test: feedline as a hostile new user meets it. Bad input, faults and odd environments:
# every case ends with the exit code the README's rule gives (0 ok, 1 runtime/data/I-O, 2 usage
# or config, 130/143 interrupted), a clear message naming the object, within a bounded time
# (timeout) and bounded memory (GNU time's max RSS), with no crash, no hang, no silently wrong
# data and no secret printed.
#
# The cases live in sections, one per area, each a file in tests/cli/robustness/ sourced here:
#   core.sh        output and exit codes, bounds on every count and size, decompression bombs,
#                  values and messages
#   dataset.sh     tar indexes that must prove they belong to their shard, errors in order, files
#                  replaced mid-run, gen's room, per-entry memory, links
#   network.sh     HTTP/S3 servers that answer wrong or trickle, secrets in URLs, nfs:// URLs
#   interrupts.sh  Ctrl-C whatever a command waits on, each exit timed to the millisecond
# ROBUSTNESS_SECTIONS="core dataset" runs a subset; ctest runs each section as a test of its own
# (cli.robustness.SECTION), the interrupts alone on the machine, the others beside other tests.
#
# usage: robustness.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
here=$(cd "$(dirname "$0")" && pwd)
run_timeout=30
show_max_lines=20

# --- helpers the sections share --------------------------------------------------------------

timer=/usr/bin/time
if [[ ! -x $timer ]]; then
  echo "FAIL: $timer (GNU time, Debian package 'time') is needed to bound memory: scripts/install-deps.sh --test"
  exit 1
fi
rss_file=$scratch/max-rss.txt
# Memory a command may use beyond what it is allowed to hold: the binary, its libraries, stacks
# and sanitizer shadow memory (ASan multiplies small allocations several times).
rss_overhead_mb=${FEEDLINE_TEST_RSS_OVERHEAD_MB:-400}
# ASan keeps freed blocks resident in its quarantine (256 MiB by default): the runs whose resident
# memory is bounded go without it, so that the bound means what it means in a build without ASan.
rss_env="ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=0:thread_local_quarantine_size_kb=0"

# bounded NAME WANT_RC LIMIT_MB NEEDLE... -- ARGS...: expect_fail, with the run's maximum
# resident set checked against LIMIT_MB + the fixed overhead (LIMIT_MB: what the command was
# allowed to hold, e.g. its --memory-budget).
bounded() {
  local name=$1 want=$2 limit=$3; shift 3
  expect_fail "$name" "$want" --as env "$rss_env" "$timer" -q -o "$rss_file" -f %M --needles "$@"
  check_rss "$name" "$limit"
}

# check_rss NAME LIMIT_MB: the last run's max RSS (from GNU time) within LIMIT_MB + overhead.
check_rss() {
  local name=$1 limit=$2 kb
  checks=$((checks + 1))
  kb=$(tail -n 1 "$rss_file" 2>/dev/null || echo "")
  if [[ ! $kb =~ ^[0-9]+$ ]]; then
    fail "$name: no max-RSS figure from GNU time ($(tr '\n' ' ' <"$rss_file" 2>/dev/null))"
    return
  fi
  if ((kb / 1024 > limit + rss_overhead_mb)); then
    fail "$name: max RSS $((kb / 1024)) MiB, more than the ${limit} MiB allowed + ${rss_overhead_mb} MiB overhead"
  else
    echo "ok: $name: max RSS $((kb / 1024)) MiB (allowed ${limit} + ${rss_overhead_mb})"
  fi
}

# must_exit NAME WANT_RC -- ARGS...: runs and checks only the exit code and that nothing
# crashed (for cases whose stderr may hold notes besides an error line).
must_exit() {
  local name=$1 want=$2; shift 3
  checks=$((checks + 1))
  run "$@"
  local bad=()
  ((rc == want)) || bad+=("exit code $rc, expected $want$( ((rc == 124)) && echo ' (hung: killed by timeout)')")
  check_no_crash "$out" "$err"
  conclude "$name: feedline ${*@Q}" "$name (exit $rc)" stderr "$err" stdout "$out" || true
}

# expect_interrupt NAME [--term] [--after SECONDS] [--json FILE] -- ARGS...: starts
# `feedline ARGS...` as a terminal would (SIGINT not ignored), sends SIGINT (SIGTERM with
# --term) once it has run SECONDS (default 1), and checks that it exits within a second with
# 130 (143), no crash, and, with --json FILE, that FILE is one valid JSON document saying
# "interrupted": true.
expect_interrupt() {
  local name=$1; shift
  local sig=INT want=130 after=1 json=""
  while [[ $1 != -- ]]; do
    case $1 in
      --term) sig=TERM; want=143 ;;
      --after) after=$2; shift ;;
      --json) json=$2; shift ;;
    esac
    shift
  done
  shift
  checks=$((checks + 1))
  local file=${name//[^A-Za-z0-9._-]/_}
  local o=$scratch/$file.out e=$scratch/$file.err
  rm -f "$o" "$e"
  "${as_terminal[@]}" "$bin" "$@" >"$o" 2>"$e" &
  local pid=$! bad=() early=0
  if ! started "$pid" "$after"; then
    fail "$name: feedline exited (code $early) before the signal, $after s in"
    show stderr "$e"
    return
  fi
  local t0
  t0=$(now_ms)
  kill -"$sig" "$pid"
  while kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo gone) != Z ]]; do
    if (($(now_ms) - t0 > 10000)); then
      bad+=("still running 10 s after SIG$sig: killed with SIGKILL")
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.01
  done
  local elapsed=$(($(now_ms) - t0)) exit_rc=0
  wait "$pid" || exit_rc=$?
  ((elapsed <= 1000)) || bad+=("took ${elapsed} ms to exit after SIG$sig, expected at most 1000 ms")
  ((exit_rc == want)) || bad+=("exit code $exit_rc, expected $want")
  check_no_crash "$o" "$e"
  if [[ -n $json ]]; then
    local v
    v=$(json_check "$json" 'd.get("interrupted") is True' "the JSON report does not say \"interrupted\": true")
    [[ -z $v ]] || bad+=("$json: $v")
  fi
  conclude "$name: feedline ${*@Q} (SIG$sig after $after s)" "$name (exit $exit_rc, ${elapsed} ms after SIG$sig)" \
    stderr "$e" stdout "$o" || true
}

# --- the sections ------------------------------------------------------------------------------

sections=${ROBUSTNESS_SECTIONS:-core dataset network interrupts}
for section in $sections; do
  echo "=== robustness: $section ==="
  # shellcheck source=/dev/null
  source "$here/robustness/$section.sh"
done
finish "robustness ($sections)"
