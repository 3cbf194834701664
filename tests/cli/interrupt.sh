#!/usr/bin/env bash
# CLI test: Ctrl-C (SIGINT) during a time-based `feedline bench storage` run stops it within one
# second with exit code 130 and a complete partial report (JSON: one document with
# "interrupted": true and "bytes" > 0; text: the report says "interrupted").
#
# usage: interrupt.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
#   SCRATCH_DIR is wiped and recreated; it must be on a real disk (O_DIRECT).
set -euo pipefail

if (($# < 2)); then
  echo "usage: $0 FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]" >&2
  exit 2
fi
bin=$(realpath -- "$1")
scratch=$2
[[ -x $bin ]] || { echo "FAIL: $bin is not an executable"; exit 1; }
case $(basename -- "$scratch") in
  scratch*) ;;
  *) echo "refusing to wipe '$scratch': the scratch directory's name must start with 'scratch'" >&2; exit 2 ;;
esac
rm -rf -- "$scratch"
mkdir -p -- "$scratch"
scratch=$(realpath -- "$scratch")
py=/usr/bin/python3

failures=0
checks=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
show() {
  echo "    $1:"
  if [[ -s $2 ]]; then sed "s/^/      | /" "$2" | head -n 40; else echo "      (empty)"; fi
}
crash_markers='Segmentation|terminate called|AddressSanitizer|LeakSanitizer|ThreadSanitizer|runtime error|core dumped|Aborted|internal error'

data=$scratch/data-64m.bin
# Lay the file out first, in its own call, so the interrupted runs time the reads only.
rc=0
timeout 60 "$bin" bench storage "$data" --create 64MiB --bs 1M --output json >"$scratch/create.json" 2>"$scratch/create.err" || rc=$?
if ((rc != 0)) || [[ $(stat -c %s "$data" 2>/dev/null || echo 0) != 67108864 ]]; then
  echo "FAIL: could not lay out the 64 MiB test file (exit $rc)"
  show stderr "$scratch/create.err"
  exit 1
fi

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# A background job of a non-interactive shell starts with SIGINT ignored; a program run from a
# terminal starts with the default action. Restore that, so the runs see what a Ctrl-C user sees.
as_terminal=("$py" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])')

# interrupt NAME FORMAT [EXTRA_ARGS...]: starts a 60 s time-based run, sends SIGINT after 2 s,
# checks how and how fast it ends, then checks the report.
interrupt() {
  local name=$1 format=$2; shift 2
  checks=$((checks + 1))
  local out=$scratch/$name.out err=$scratch/$name.err
  "${as_terminal[@]}" "$bin" bench storage "$data" --create 64MiB --bs 4k --rw randread --runtime 60s --time-based \
    --output "$format" "$@" >"$out" 2>"$err" &
  local pid=$!
  sleep 2
  local bad=()
  if ! kill -0 "$pid" 2>/dev/null; then
    local early=0
    wait "$pid" || early=$?
    fail "$name: feedline exited (code $early) before the signal, 2 s into a 60 s run"
    show stderr "$err"
    return
  fi
  local t0 t1 elapsed
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
  t1=$(now_ms)
  local rc=0
  wait "$pid" || rc=$?
  elapsed=$((t1 - t0))
  ((elapsed <= 1000)) || bad+=("took ${elapsed} ms to exit after SIGINT, expected at most 1000 ms")
  ((rc == 130)) || bad+=("exit code $rc, expected 130")
  if grep -Eq "$crash_markers" "$out" "$err"; then bad+=("crash or internal error in the output"); fi
  if [[ $format == json ]]; then
    local verdict
    verdict=$("$py" - "$out" <<'EOF' || true
import json, sys
text = open(sys.argv[1]).read()
problems = []
try:
    dec = json.JSONDecoder()
    doc, end = dec.raw_decode(text.lstrip())
    rest = text.lstrip()[end:].strip()
    if rest:
        problems.append("more than one JSON document on stdout (trailing %r...)" % rest[:60])
except ValueError as e:
    print("stdout is not valid JSON: %s" % e)
    sys.exit(0)
if not isinstance(doc, dict):
    problems.append("the JSON document is not an object")
else:
    if doc.get("interrupted") is not True:
        problems.append('"interrupted" is %r, expected true' % doc.get("interrupted"))
    b = doc.get("bytes")
    if not isinstance(b, int) or b <= 0:
        problems.append('"bytes" is %r, expected > 0' % b)
    s = doc.get("seconds")
    if not isinstance(s, (int, float)) or not (1.0 <= s <= 10.0):
        problems.append('"seconds" is %r, expected about 2 (the time until the signal)' % s)
print("; ".join(problems))
EOF
)
    [[ -z $verdict ]] || bad+=("$verdict")
  else
    grep -q "interrupted" "$out" || bad+=("the text report does not say 'interrupted'")
    grep -Eq "^  read: " "$out" || bad+=("the text report has no 'read:' line")
  fi
  if ((${#bad[@]} > 0)); then
    fail "$name: feedline bench storage ... --output $format $*"
    local b
    for b in "${bad[@]}"; do echo "    - $b"; done
    show stderr "$err"
    show stdout "$out"
  else
    echo "ok: $name (exit $rc, ${elapsed} ms after SIGINT)"
  fi
}

interrupt json json
interrupt text text
interrupt json-posix json --engine posix
interrupt json-direct-4jobs json --direct --numjobs 4

# Ctrl-C while --create lays out a file: stop promptly, and leave neither the partial temporary
# file nor a truncated target behind.
checks=$((checks + 1))
big=$scratch/big.bin
"${as_terminal[@]}" "$bin" bench storage "$big" --create 4GiB --output json >"$scratch/create-int.out" 2>"$scratch/create-int.err" &
pid=$!
sleep 0.5
if ! kill -0 "$pid" 2>/dev/null; then
  rc=0
  wait "$pid" || rc=$?
  echo "skip: Ctrl-C during --create: the 4 GiB layout finished within 0.5 s (exit $rc)"
  rm -f -- "$big"
else
  t0=$(now_ms)
  kill -INT "$pid"
  while kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo gone) != Z ]]; do
    if (($(now_ms) - t0 > 10000)); then kill -KILL "$pid" 2>/dev/null || true; break; fi
    sleep 0.01
  done
  t1=$(now_ms)
  rc=0
  wait "$pid" || rc=$?
  bad=()
  ((t1 - t0 <= 1000)) || bad+=("took $((t1 - t0)) ms to exit after SIGINT, expected at most 1000 ms")
  ((rc == 130)) || bad+=("exit code $rc, expected 130")
  if grep -Eq "$crash_markers" "$scratch/create-int.out" "$scratch/create-int.err"; then bad+=("crash or internal error in the output"); fi
  leftovers=$(find "$scratch" -name 'big.bin*' -printf '%f (%s bytes) ')
  [[ -z $leftovers ]] || bad+=("left behind: $leftovers")
  if ((${#bad[@]} > 0)); then
    fail "Ctrl-C during --create 4GiB"
    for b in "${bad[@]}"; do echo "    - $b"; done
    show stderr "$scratch/create-int.err"
  else
    echo "ok: Ctrl-C during --create (exit $rc, $((t1 - t0)) ms after SIGINT, nothing left behind)"
  fi
  rm -f -- "$scratch"/big.bin*
fi

if ((failures > 0)); then
  echo "interrupt: $failures of $checks checks FAILED"
  exit 1
fi
echo "interrupt: all $checks checks passed"
