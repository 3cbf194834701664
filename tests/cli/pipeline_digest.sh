#!/usr/bin/env bash
# CLI test: exactly-once delivery through `feedline run`, checked against an independent
# computation. For datasets written by `feedline gen` (tar and files, with and without zstd), by
# GNU tar and by Python's tarfile (ustar, GNU long names, pax headers), delivered.digest in the
# --json report must equal the sum modulo 2^64 of XXH3-64 over every decoded member, as Python
# computes it from the bytes on disk (tarfile, zstandard or the zstd tool, xxhash), times the
# epochs; over --world-size 3 the ranks' counts and digests must add up to the whole. The report
# must hold every key issue 3 asks for, with consistent values.
#
# usage: pipeline_digest.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
#   SCRATCH_DIR is wiped and recreated; it must be on a real disk (O_DIRECT).
#   Needs /usr/bin/python3 with xxhash (python3-xxhash), and python3-zstandard or the zstd tool;
#   GNU tar for the GNU tar datasets.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
require_xxhash
require_zstd_decoder

# --- the independent computation -----------------------------------------------------------------
# digest.py ROOT [--skip NAME]...: prints "DIGEST MEMBERS DECODED_BYTES" (see write_digest_py in lib.sh).
write_digest_py "$scratch/digest.py"

# check.py REPORT.json KEY=VALUE...: checks the report's required keys and types, and the
# expectations given (samples, digest, epochs, bytes, world_size, rank, decode_threads,
# complete=1: every stage handled every delivered sample). Prints the problems, one per line.
# With accounting=1 it checks only the stall accounting instead: stage and queue fractions in
# [0, 1], busy + starved + blocked = 1 per stage, mean occupancy within the capacity.
cat >"$scratch/check.py" <<'EOF'
import json, math, sys
problems = []
accounting_problems = []
def bad(msg): problems.append(msg)
def abad(msg): accounting_problems.append(msg)
try:
    text = open(sys.argv[1]).read()
    doc, end = json.JSONDecoder().raw_decode(text)
    if text[end:].strip():
        bad("the JSON file holds more than one document")
except (OSError, ValueError) as e:
    print("the JSON report is missing or invalid: %s" % e)
    sys.exit(0)
exp = dict(a.split("=", 1) for a in sys.argv[2:])
def num(x): return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
def uint(x): return isinstance(x, int) and not isinstance(x, bool) and x >= 0
def frac(path, x, report=bad):
    if not num(x) or not (-1e-9 <= x <= 1 + 1e-9):
        report("%s is %r, expected a fraction in [0, 1]" % (path, x))
def need(obj, key, path, check):
    if not isinstance(obj, dict) or key not in obj:
        bad("missing key %s%s" % (path, key)); return None
    v = obj[key]
    if not check(v):
        bad("%s%s has the wrong type or range: %r" % (path, key, v)); return None
    return v
for k in ("samples", "bytes", "epochs"):
    need(doc, k, "", uint)
for k in ("wall_seconds", "samples_per_second", "bytes_per_second"):
    need(doc, k, "", lambda v: num(v) and v >= 0)
# AU is null when not measured: a run of one step (AU leaves the first step out).
steps = need(doc, "au_steps", "", uint)
au = need(doc, "au", "", lambda v: num(v) or (v is None and steps == 0))
if au is not None: frac("au", au)
if steps is not None and steps > 0 and au is None: bad("au is null although au_steps is %r" % steps)
cw = need(doc, "consumer_wait", "", lambda v: isinstance(v, dict))
if cw is not None:
    f = need(cw, "fraction", "consumer_wait.", num)
    if f is not None: frac("consumer_wait.fraction", f)
    ps = [need(cw, p, "consumer_wait.", lambda v: num(v) and v >= 0) for p in ("p50_ms", "p90_ms", "p99_ms")]
    if None not in ps and not (ps[0] <= ps[1] <= ps[2]):
        bad("consumer_wait percentiles are not ordered: p50 %r p90 %r p99 %r" % tuple(ps))
need(doc, "input_bound", "", lambda v: v in ("no", "moderate", "high"))
stages = need(doc, "stages", "", lambda v: isinstance(v, list) and len(v) > 0) or []
for i, s in enumerate(stages):
    p = "stages[%d]." % i
    name = need(s, "name", p, lambda v: isinstance(v, str) and v != "")
    p = "stages[%s]." % name
    need(s, "threads", p, lambda v: uint(v) and v >= 1)
    fr = []
    for k in ("busy_fraction", "starved_fraction", "blocked_fraction"):
        v = need(s, k, p, num)
        if v is not None: frac(p + k, v, abad); fr.append(v)
    if len(fr) == 3 and abs(sum(fr) - 1) > 0.02:
        abad("%s busy + starved + blocked = %.3f, expected 1 (each thread's time is in exactly one state)" % (p, sum(fr)))
    need(s, "cpu_seconds", p, lambda v: num(v) and v >= 0)
    need(s, "items", p, uint)
    need(s, "bytes", p, uint)
queues = need(doc, "queues", "", lambda v: isinstance(v, list) and len(v) > 0) or []
for i, q in enumerate(queues):
    name = need(q, "name", "queues[%d]." % i, lambda v: isinstance(v, str) and v != "")
    p = "queues[%s]." % name
    cap = need(q, "capacity", p, lambda v: uint(v) and v >= 1)
    occ = need(q, "mean_occupancy", p, lambda v: num(v) and v >= 0)
    if cap is not None and occ is not None and occ > cap + 1e-6:
        abad("%smean_occupancy %.3f exceeds the capacity %d" % (p, occ, cap))
    for k in ("producer_blocked_fraction", "consumer_starved_fraction"):
        v = need(q, k, p, num)
        if v is not None: frac(p + k, v, abad)
bn = need(doc, "bottleneck", "", lambda v: isinstance(v, dict))
if bn is not None:
    need(bn, "stage", "bottleneck.", lambda v: isinstance(v, str) and v != "")
    need(bn, "evidence", "bottleneck.", lambda v: isinstance(v, str) and v != "")
    need(bn, "suggestion", "bottleneck.", lambda v: isinstance(v, str) and v != "")
dl = need(doc, "delivered", "", lambda v: isinstance(v, dict))
if dl is not None:
    need(dl, "samples", "delivered.", uint)
    # a decimal integer in the JSON text: json parses it as an int, never a float
    need(dl, "digest", "delivered.", lambda v: uint(v) and v < 2**64)
if doc.get("interrupted") is not False:
    bad('"interrupted" is %r, expected false' % doc.get("interrupted"))
if doc.get("error", None) is not None:
    bad('"error" is %r, expected null' % doc.get("error"))
if isinstance(dl, dict) and doc.get("samples") != dl.get("samples"):
    bad("samples %r differs from delivered.samples %r" % (doc.get("samples"), dl.get("samples")))
w = doc.get("wall_seconds")
if num(w) and w > 0 and num(doc.get("samples_per_second")) and uint(doc.get("samples")):
    if abs(doc["samples"] / w - doc["samples_per_second"]) > 0.01 * doc["samples_per_second"] + 1e-6:
        bad("samples_per_second %r is not samples / wall_seconds (%r)" % (doc["samples_per_second"], doc["samples"] / w))
if "samples" in exp and isinstance(dl, dict) and dl.get("samples") != int(exp["samples"]):
    bad("delivered.samples is %r, expected %s" % (dl.get("samples"), exp["samples"]))
if "digest" in exp and isinstance(dl, dict) and dl.get("digest") != int(exp["digest"]):
    bad("delivered.digest is %r, expected %s (the Python computation)" % (dl.get("digest"), exp["digest"]))
if "epochs" in exp and doc.get("epochs") != int(exp["epochs"]):
    bad("epochs is %r, expected %s" % (doc.get("epochs"), exp["epochs"]))
if "bytes" in exp and doc.get("bytes") != int(exp["bytes"]):
    bad("bytes is %r, expected %s (decoded bytes of every delivered member)" % (doc.get("bytes"), exp["bytes"]))
cfg = doc.get("config", {})
for k in ("world_size", "rank", "decode_threads"):
    if k in exp and cfg.get(k) != int(exp[k]):
        bad("config.%s is %r, expected %s" % (k, cfg.get(k), exp[k]))
if "decode_threads" in exp:
    d = [s for s in stages if isinstance(s, dict) and s.get("name") == "decode"]
    if not d or d[0].get("threads") != int(exp["decode_threads"]):
        bad("the decode stage reports %r threads, expected %s" % (d[0].get("threads") if d else None, exp["decode_threads"]))
if "storage_threads" in exp:
    st = [s for s in stages if isinstance(s, dict) and s.get("name") == "storage"]
    io = doc.get("io", {})
    if not st or st[0].get("threads") != int(exp["storage_threads"]) or io.get("storage_threads") != int(exp["storage_threads"]):
        bad("the storage stage reports %r threads (io.storage_threads %r), expected %s" % (st[0].get("threads") if st else None, io.get("storage_threads"), exp["storage_threads"]))
if exp.get("complete") == "1" and isinstance(dl, dict):
    for s in stages:
        # decode's work may have been done inline by the storage threads (nothing to decode but
        # the digest): counted as items_inline, and every delivered sample still once
        if isinstance(s, dict) and s.get("items", 0) + s.get("items_inline", 0) != dl.get("samples"):
            bad("stage %r handled %r items, expected every delivered sample (%r)" % (s.get("name"), s.get("items"), dl.get("samples")))
print("\n".join(accounting_problems if exp.get("accounting") == "1" else problems))
EOF

# py_digest ROOT [--skip NAME]...: sets want_digest, want_members, want_bytes (one epoch).
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
# check_run NAME JSON KEY=VALUE... : the report at JSON meets check.py's expectations (counts a
# failure otherwise; always returns 0).
check_run() {
  local name=$1 json=$2; shift 2
  local problems
  problems=$("$py" "$scratch/check.py" "$json" "$@")
  if [[ -n $problems ]]; then
    fail "$name"
    sed 's/^/    - /' <<<"$problems"
    show stderr "$err"
    return 0
  fi
  echo "ok: $name"
}

# --- datasets written by feedline gen ---------------------------------------------------------------
gen_args=(--samples 500 --sample-size normal:32KiB:8KiB --samples-per-shard 64 --compressibility 0.5 --seed 3)
epochs=2
for variant in tar-zstd files-zstd files-none tar-none; do
  format=${variant%%-*}
  compress=${variant#*-}
  [[ $compress == zstd ]] && compress=zstd:3
  ds=$scratch/gen-$variant
  checks=$((checks + 1))
  must_run "gen $variant" gen "$ds" --format "$format" --compress "$compress" "${gen_args[@]}" --output json || continue
  cp "$out" "$scratch/gen-$variant.json"
  py_digest "$ds"
  gen_digest=$(json_get "$scratch/gen-$variant.json" 'd["digest"]')
  gen_bytes=$(json_get "$scratch/gen-$variant.json" 'd["bytes_decoded"]')
  want_members_gen=$(json_get "$scratch/gen-$variant.json" 'd["members"]')
  if [[ $gen_digest != "$want_digest" || $gen_bytes != "$want_bytes" || $want_members_gen != "$want_members" ]]; then
    fail "gen $variant: gen --output json says digest $gen_digest, $gen_bytes decoded bytes, $want_members_gen members; Python computes $want_digest, $want_bytes, $want_members"
  else
    echo "ok: gen $variant: digest $gen_digest matches the Python computation ($want_members members)"
  fi
  full=$(times "$epochs" "$want_digest")
  full_bytes=$((epochs * want_bytes))

  # Deterministic: the same arguments give the same bytes (indexes included).
  checks=$((checks + 1))
  if must_run "gen $variant again" gen "$ds-again" --format "$format" --compress "$compress" "${gen_args[@]}"; then
    if diff -r -q -- "$ds" "$ds-again" >"$scratch/diff.txt" 2>&1; then
      echo "ok: gen $variant: the same arguments give the same bytes"
    else
      fail "gen $variant: a second gen with the same arguments wrote different bytes"
      show diff "$scratch/diff.txt"
    fi
  fi
  rm -rf -- "$ds-again"

  checks=$((checks + 1))
  json=$scratch/run-$variant.json
  if must_run "run $variant" run "$ds" --batch-size 16 --epochs "$epochs" --json "$json"; then
    check_run "run $variant: exactly once over $epochs epochs, report complete" "$json" \
      samples=$((500 * epochs)) digest="$full" epochs="$epochs" bytes="$full_bytes" complete=1
    checks=$((checks + 1))
    check_run "run $variant: stall accounting consistent" "$json" accounting=1
  fi

  # The same delivery, however the pipeline is shaped.
  shapes=("--batch-size 16 --no-shuffle" "--batch-size 16 --decode-threads 5 --io-depth 1 --prefetch 1"
          "--batch-size 16 --engine posix" "--batch-size 16 --direct" "--batch-size 16 --memory-budget 8MiB"
          "--batch-size 7 --seed 77" "--batch-size 1000" "--batch-size 16 --shard-shuffle 3")
  [[ $format == tar ]] && shapes+=("--batch-size 16 --no-index")
  # Several storage threads admit from one sampler: each sample still exactly once (io_depth
  # 5 split unevenly over 3 queues), and one thread alone.
  for st in 3 1; do
    checks=$((checks + 1))
    json=$scratch/run-$variant-st$st.json
    rm -f -- "$json"
    if must_run "run $variant --storage-threads $st" run "$ds" --epochs "$epochs" --batch-size 16 \
        --storage-threads "$st" --io-depth 5 --json "$json"; then
      check_run "run $variant --storage-threads $st: exactly once, report complete" "$json" \
        samples=$((500 * epochs)) digest="$full" epochs="$epochs" complete=1 storage_threads="$st"
    fi
  done
  for shape in "${shapes[@]}"; do
    checks=$((checks + 1))
    read -ra extra <<<"$shape"
    json=$scratch/run-$variant-shape.json
    rm -f -- "$json"
    if must_run "run $variant $shape" run "$ds" --epochs "$epochs" "${extra[@]}" --json "$json"; then
      check_run "run $variant $shape: same digest" "$json" samples=$((500 * epochs)) digest="$full" epochs="$epochs"
    fi
  done

  # --drop-last: 500 = 31 x 16 + 4, so each epoch delivers 496 samples.
  checks=$((checks + 1))
  json=$scratch/run-$variant-droplast.json
  if must_run "run $variant --drop-last" run "$ds" --batch-size 16 --epochs "$epochs" --drop-last --json "$json"; then
    check_run "run $variant --drop-last: 496 samples per epoch" "$json" samples=$((496 * epochs)) epochs="$epochs"
  fi

  # Three ranks: their samples add up to the dataset per epoch, their digests to the whole.
  checks=$((checks + 1))
  sum_digest=0
  sum_samples=0
  counts=()
  rank_ok=1
  for rank in 0 1 2; do
    checks=$((checks + 1))
    json=$scratch/run-$variant-rank$rank.json
    if ! must_run "run $variant --rank $rank" run "$ds" --batch-size 16 --epochs "$epochs" --world-size 3 \
      --rank "$rank" --json "$json"; then
      rank_ok=0
      continue
    fi
    problems=$("$py" "$scratch/check.py" "$json" world_size=3 rank="$rank" epochs="$epochs")
    if [[ -n $problems ]]; then
      fail "run $variant --rank $rank of 3"
      sed 's/^/    - /' <<<"$problems"
      rank_ok=0
      continue
    fi
    n=$(json_get "$json" 'd["delivered"]["samples"]')
    g=$(json_get "$json" 'd["delivered"]["digest"]')
    counts+=("$n")
    sum_samples=$((sum_samples + n))
    sum_digest=$("$py" -c 'import sys; print((int(sys.argv[1]) + int(sys.argv[2])) % 2**64)' "$sum_digest" "$g")
  done
  if ((rank_ok)); then
    if ((sum_samples != 500 * epochs)) || [[ $sum_digest != "$full" ]]; then
      fail "run $variant --world-size 3: ranks delivered ${counts[*]} samples (sum $sum_samples, expected $((500 * epochs))) with digests summing to $sum_digest (expected $full)"
    elif ((counts[0] == 0 || counts[1] == 0 || counts[2] == 0)); then
      fail "run $variant --world-size 3: ranks delivered ${counts[*]} samples: a rank got nothing"
    else
      echo "ok: run $variant --world-size 3: ranks ${counts[*]} samples add up to $((500 * epochs)), digests to the whole"
    fi
  fi
done

# The equal-batches rule: 500 samples over 3 ranks in batches of 166 would give ranks 0 and 1 a
# second batch of one sample; every rank takes 166, and the report says 2 go to no rank.
checks=$((checks + 1))
run run "$ds" --batch-size 166 --world-size 3 --rank 0 --json "$scratch/left-out.json"
v=$(json_check "$scratch/left-out.json" "d['samples'] == 166 and d['left_out_per_epoch'] == 2" "left_out_per_epoch")
if ((rc == 0)) && [[ -z $v ]] && grep -q "note: 2 sample(s) of each epoch went to no rank" "$out"; then
  echo "ok: the equal-batches rule's left-out samples are counted and noted"
else
  fail "equal-batches note: exit $rc ${v}"
  show stdout "$out"
fi

# --- many small files: past 4,096 objects each file opens with its read -------------------------------
# (io_uring: an OPENAT linked to the READ in the ring; the POSIX engine: open(2) per read.)
ds=$scratch/gen-many
checks=$((checks + 1))
if must_run "gen many" gen "$ds" --format files --samples 5000 --sample-size uniform:1KiB:3KiB --seed 5; then
  py_digest "$ds"
  for shape in "" "--direct" "--engine posix" "--storage-threads 2 --io-depth 3"; do
    checks=$((checks + 1))
    read -ra extra <<<"$shape"
    json=$scratch/run-many.json
    rm -f -- "$json"
    if must_run "run 5,000 files ${shape:-(defaults)}" run "$ds" --batch-size 64 --json "$json" "${extra[@]}"; then
      check_run "run 5,000 files ${shape:-(defaults)}: exactly once, report complete" "$json" \
        samples=5000 digest="$want_digest" epochs=1 complete=1
    fi
  done
fi
rm -rf -- "$ds"

# --- a stale index: the shard was replaced after its index was written ------------------------------
# The reader must notice (the index records the shard's size), scan the shard instead, and say so.
stale=$scratch/stale-index
checks=$((checks + 1))
if must_run "gen for the stale index" gen "$stale" --format tar --samples 30 --sample-size 10000 --samples-per-shard 10 &&
   must_run "gen the replacement shard" gen "$scratch/other" --format tar --samples 30 --sample-size 12000 \
     --samples-per-shard 10 --seed 9; then
  cp -- "$scratch/other/shard-000001.tar" "$stale/shard-000001.tar"
  py_digest "$stale"
  json=$scratch/stale-index.json
  if must_run "run with a stale index" run "$stale" --json "$json"; then
    check_run "run with a stale index: digest matches the shards as they are" "$json" digest="$want_digest" samples=30
    checks=$((checks + 1))
    if grep -h "shard-000001.tar" "$out" "$err" | grep -qi "index"; then
      echo "ok: run with a stale index: says it ignored shard-000001.tar's index"
    else
      fail "run with a stale index: nothing on stdout or stderr says that shard-000001.tar.idx was stale and ignored"
      show stderr "$err"
    fi
  fi
fi

# --- tar shards written by other tools (no index: feedline scans the headers) --------------------------
# check_foreign NAME DIR [RUN_ARGS...]: gen-independent dataset: run --format tar, compare to Python.
check_foreign() {
  local name=$1 ds=$2; shift 2
  checks=$((checks + 1))
  py_digest "$ds"
  local json=$scratch/foreign-$name.json
  must_run "run $name" run "$ds" --format tar --batch-size 8 --epochs 2 --json "$json" "$@" || return 0
  check_run "run $name: digest matches Python's tarfile ($want_members members)" "$json" \
    digest="$(times 2 "$want_digest")" bytes=$((2 * want_bytes)) epochs=2
  checks=$((checks + 1))
  check_run "run $name: stall accounting consistent" "$json" accounting=1
}

# Sample files with random sizes: NNNNNN.bin (random bytes) + NNNNNN.cls (a label).
"$py" - "$scratch/src" <<'EOF'
import os, random, sys
root = sys.argv[1]
r = random.Random(11)
for sub, n in (("plain", 40), ("forzst", 12)):
    d = os.path.join(root, sub, "data")
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        with open(os.path.join(d, "%06d.bin" % i), "wb") as f:
            f.write(r.randbytes(r.choice([0, 1, 511, 512, 513, r.randint(1, 40000)])))
        with open(os.path.join(d, "%06d.cls" % i), "w") as f:
            f.write(str(r.randint(0, 999)))
EOF
if command -v tar >/dev/null && tar --version 2>/dev/null | grep -q 'GNU tar'; then
  # GNU tar's default format (gnu), of a directory: a directory member, then the files.
  mkdir -p "$scratch/gnutar"
  tar cf "$scratch/gnutar/a.tar" -C "$scratch/src/plain" data
  # The same files in two shards, ustar and pax (posix) formats.
  mkdir -p "$scratch/gnutar-formats"
  (cd "$scratch/src/plain/data" && tar cf "$scratch/gnutar-formats/ustar.tar" --format=ustar 00000*.* 00001*.*)
  (cd "$scratch/src/plain/data" && tar cf "$scratch/gnutar-formats/pax.tar" --format=posix 00002*.* 00003*.*)
  # GNU long names (././@LongLink) for member names over 100 characters.
  long=$scratch/src/long/$(printf 'd%.0s' {1..60})/$(printf 'e%.0s' {1..60})
  mkdir -p "$long"
  cp "$scratch"/src/plain/data/00000[0-4].* "$long"/
  mkdir -p "$scratch/gnutar-long"
  tar cf "$scratch/gnutar-long/long.tar" --format=gnu -C "$scratch/src/long" .
  # zstd members compressed by the zstd tool (from files, so each frame records its size).
  if command -v zstd >/dev/null; then
    (cd "$scratch/src/forzst/data" && for f in *.bin; do zstd -q --rm "$f"; done)
    mkdir -p "$scratch/gnutar-zstd"
    tar cf "$scratch/gnutar-zstd/z.tar" -C "$scratch/src/forzst" data
  fi
  # zstd frames that do not record their decompressed size (compressed from a pipe, as streaming
  # writers do): decoded with the right digest, or refused with one clean line naming the shard.
  if command -v zstd >/dev/null; then
    mkdir -p "$scratch/src/pipezst/data" "$scratch/pipe-zstd"
    for f in "$scratch"/src/plain/data/00000[0-5].*; do
      zstd -q -c <"$f" >"$scratch/src/pipezst/data/$(basename -- "$f").zst"
    done
    tar cf "$scratch/pipe-zstd/p.tar" -C "$scratch/src/pipezst" data
    checks=$((checks + 1))
    py_digest "$scratch/pipe-zstd"
    json=$scratch/foreign-pipe-zstd.json
    run run "$scratch/pipe-zstd" --format tar --json "$json"
    if ((rc == 0)); then
      check_run "run pipe-zstd (frames without a content size): digest matches" "$json" digest="$want_digest"
    elif ((rc == 1)) && (($(wc -l <"$err") == 1)) && grep -q "p.tar" "$err" && ! grep -Eq "$crash_markers" "$out" "$err"; then
      echo "ok: run pipe-zstd (frames without a content size): refused cleanly: $(cat "$err")"
    else
      fail "run pipe-zstd (frames without a content size): exit code $rc, expected 0, or 1 with one error line naming p.tar"
      show stderr "$err"
    fi
  fi
  for ds in gnutar gnutar-formats gnutar-long gnutar-zstd; do
    if [[ -d $scratch/$ds ]]; then check_foreign "$ds" "$scratch/$ds"; fi
  done
  [[ -d $scratch/gnutar-zstd ]] || echo "skip: GNU tar with zstd members: the zstd tool is not installed"
else
  echo "skip: GNU tar datasets: GNU tar is not installed"
fi

# Python's tarfile: pax (with a directory, a symlink, a hard link and a FIFO to ignore, a non-ASCII
# and a 150-character name) and GNU format with long names.
"$py" - "$scratch" <<'EOF'
import io, os, random, sys, tarfile
root = sys.argv[1]
r = random.Random(5)
def add(t, name, data):
    ti = tarfile.TarInfo(name); ti.size = len(data); ti.mtime = 1700000000; ti.mode = 0o644
    t.addfile(ti, io.BytesIO(data))
def special(t, name, kind, link=""):
    ti = tarfile.TarInfo(name); ti.type = kind; ti.linkname = link; ti.mode = 0o755
    t.addfile(ti)
os.makedirs(os.path.join(root, "pytar-pax"), exist_ok=True)
with tarfile.open(os.path.join(root, "pytar-pax", "a.tar"), "w", format=tarfile.PAX_FORMAT) as t:
    special(t, "dir", tarfile.DIRTYPE)
    for i in range(30):
        add(t, "dir/%06d.bin" % i, r.randbytes(r.randint(0, 9000)))
        add(t, "dir/%06d.cls" % i, b"%d" % r.randint(0, 999))
    special(t, "dir/link-to-1", tarfile.SYMTYPE, "000001.bin")
    special(t, "dir/hard-to-2", tarfile.LNKTYPE, "dir/000002.bin")
    special(t, "dir/a-fifo", tarfile.FIFOTYPE)
    add(t, "dir/\u00e9t\u00e9-\u65e5\u672c.bin", r.randbytes(777))
    add(t, "dir/" + "p" * 150 + ".bin", r.randbytes(5000))
with tarfile.open(os.path.join(root, "pytar-pax", "b.tar"), "w", format=tarfile.PAX_FORMAT) as t:
    for i in range(30, 45):
        add(t, "%06d.bin" % i, r.randbytes(r.randint(1, 20000)))
        add(t, "%06d.cls" % i, b"%d" % i)
os.makedirs(os.path.join(root, "pytar-gnu"), exist_ok=True)
with tarfile.open(os.path.join(root, "pytar-gnu", "g.tar"), "w", format=tarfile.GNU_FORMAT) as t:
    for i in range(20):
        stem = "%06d_" % i + "L" * 120
        add(t, stem + ".bin", r.randbytes(r.randint(1, 9000)))
        add(t, stem + ".cls", b"%d" % i)
EOF
check_foreign pytar-pax "$scratch/pytar-pax"
check_foreign pytar-gnu "$scratch/pytar-gnu"

# Empty members: zero-byte files, and zstd frames (recording their size) of zero bytes, in a tar
# shard and in a files dataset. They count in the digest (XXH3-64 of nothing) like any member.
if "$py" -c 'import zstandard' 2>/dev/null; then
  "$py" - "$scratch" <<'EOF'
import io, os, random, sys, tarfile, zstandard
root = sys.argv[1]
r = random.Random(3)
z = zstandard.ZstdCompressor(write_content_size=True, write_checksum=True)
members = []
for i in range(12):
    data = b"" if i % 3 == 0 else r.randbytes(r.randint(1, 3000))
    if i % 2:
        members.append(("%06d.bin.zst" % i, z.compress(data)))
    else:
        members.append(("%06d.bin" % i, data))
os.makedirs(os.path.join(root, "empty-members-tar"), exist_ok=True)
with tarfile.open(os.path.join(root, "empty-members-tar", "e.tar"), "w", format=tarfile.USTAR_FORMAT) as t:
    for name, data in members:
        ti = tarfile.TarInfo(name); ti.size = len(data); ti.mtime = 0
        t.addfile(ti, io.BytesIO(data))
os.makedirs(os.path.join(root, "empty-members-files"), exist_ok=True)
for name, data in members:
    with open(os.path.join(root, "empty-members-files", name), "wb") as f:
        f.write(data)
EOF
  check_foreign empty-members-tar "$scratch/empty-members-tar"
  checks=$((checks + 1))
  py_digest "$scratch/empty-members-files"
  json=$scratch/empty-members-files.json
  if must_run "run empty-members-files" run "$scratch/empty-members-files" --format files --batch-size 5 --json "$json"; then
    check_run "run empty-members-files: digest matches ($want_members members, some empty)" "$json" \
      digest="$want_digest" samples=12
  fi
else
  echo "skip: empty zstd members: python3-zstandard is not installed"
fi

finish pipeline_digest
