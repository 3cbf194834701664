#!/usr/bin/env bash
# CLI test: Ctrl-C (SIGINT) during a time-based `feedline bench storage` run stops it within one
# second with exit code 130 and a complete partial report (JSON: one document with
# "interrupted": true and "bytes" > 0; text: the report says "interrupted").
#
# usage: interrupt.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
#   SCRATCH_DIR is wiped and recreated; it must be on a real disk (O_DIRECT).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"

data=$scratch/data-64m.bin
# Lay the file out first, in its own call, so the interrupted runs time the reads only.
rc=0
timeout 60 "$bin" bench storage "$data" --create 64MiB --bs 1M --output json >"$scratch/create.json" 2>"$scratch/create.err" || rc=$?
if ((rc != 0)) || [[ $(stat -c %s "$data" 2>/dev/null || echo 0) != 67108864 ]]; then
  echo "FAIL: could not lay out the 64 MiB test file (exit $rc)"
  show stderr "$scratch/create.err"
  exit 1
fi

# interrupt NAME FORMAT [EXTRA_ARGS...]: starts a 60 s time-based run, sends SIGINT after 2 s,
# checks how and how fast it ends, then checks the report.
interrupt() {
  local name=$1 format=$2; shift 2
  checks=$((checks + 1))
  local out=$scratch/$name.out err=$scratch/$name.err
  "${as_terminal[@]}" "$bin" bench storage "$data" --create 64MiB --bs 4k --rw randread --runtime 60s --time-based \
    --output "$format" "$@" >"$out" 2>"$err" &
  local pid=$!
  local bad=() early elapsed exit_rc
  if ! started "$pid" 2; then
    fail "$name: feedline exited (code $early) before the signal, 2 s into a 60 s run"
    show stderr "$err"
    return
  fi
  interrupt_pid "$pid"
  check_sigint_exit "$out" "$err"
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
  conclude "$name: feedline bench storage ... --output $format $*" "$name (exit $exit_rc, ${elapsed} ms after SIGINT)" \
    stderr "$err" stdout "$out" || true
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
if ! started "$pid" 0.5; then
  echo "skip: Ctrl-C during --create: the 4 GiB layout finished within 0.5 s (exit $early)"
  rm -f -- "$big"
else
  bad=()
  interrupt_pid "$pid"
  check_sigint_exit "$scratch/create-int.out" "$scratch/create-int.err"
  leftovers=$(find "$scratch" -name 'big.bin*' -printf '%f (%s bytes) ')
  [[ -z $leftovers ]] || bad+=("left behind: $leftovers")
  conclude "Ctrl-C during --create 4GiB" "Ctrl-C during --create (exit $exit_rc, $elapsed ms after SIGINT, nothing left behind)" \
    stderr "$scratch/create-int.err" || true
  rm -f -- "$scratch"/big.bin*
fi

finish interrupt
