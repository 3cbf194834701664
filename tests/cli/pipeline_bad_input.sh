#!/usr/bin/env bash
# CLI test: bad datasets given to `feedline run` (a truncated tar shard, a corrupt zstd frame, a
# non-tar file in a tar dataset, an empty dataset, a sample larger than --memory-budget) each get
# one clear line on stderr ("feedline: error: ..." naming the object and, where it applies, the
# offset), exit code 1, no crash and no hang; with --on-error skip the run goes on, and the report
# counts what it skipped. Bad options to `run` and `gen` are usage errors: exit 2, one line,
# nothing on stdout.
#
# usage: pipeline_bad_input.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
#   SCRATCH_DIR is wiped and recreated; it must be on a real disk (O_DIRECT).
#   Needs /usr/bin/python3 with xxhash (python3-xxhash) and python3-zstandard or the zstd tool.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
require_xxhash
require_zstd_decoder
run_timeout=20

# Python: the digest of a dataset without some samples, as pipeline_digest.sh computes it.
# digest.py ROOT [--skip-key KEY]...: prints "DIGEST MEMBERS DECODED_BYTES" over every member (tar
# members and files; ".zst" decompressed) whose key (base name up to the first '.') is not a KEY.
write_digest_py "$scratch/digest.py"
# member_offsets SHARD INDEX: "HEADER_OFFSET DATA_OFFSET SIZE" of the INDEX-th member (Python's tarfile).
member_offsets() {
  "$py" -c 'import sys, tarfile; m = list(tarfile.open(sys.argv[1], "r:"))[int(sys.argv[2])]; print(m.offset, m.offset_data, m.size)' "$1" "$2"
}
# overwrite FILE OFFSET: 16 bytes of garbage at OFFSET, in place.
overwrite() {
  printf '\xde\xad\xbe\xef\x01\x23\x45\x67\x89\xab\xcd\xef\xde\xad\xbe\xef' |
    dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# --- datasets ------------------------------------------------------------------------------------
# A tar dataset: 3 shards of 10 samples (000000.bin + 000000.cls, ...), 10000-byte samples.
tar_ds=$scratch/tar-good
must_gen "$tar_ds" --format tar --samples 30 --sample-size 10000 --samples-per-shard 10 --seed 1
shard="shard-000001.tar"
# The 5th member of shard 1 is sample 000012's .bin; members 0-3 are samples 000010 and 000011.
read -r hdr data size < <(member_offsets "$tar_ds/$shard" 4)
# copy_ds NAME [keep-index]: a fresh copy of the tar dataset (without its indexes unless asked).
copy_ds() {
  local d=$scratch/$1
  rm -rf -- "$d"
  cp -r -- "$tar_ds" "$d"
  [[ ${2:-} == keep-index ]] || rm -f -- "$d"/*.idx
  echo "$d"
}

# --- truncated tar shards --------------------------------------------------------------------------
d=$(copy_ds trunc-member)
truncate -s $((data + size / 2)) "$d/$shard"
expect_runtime "tar shard cut mid-member (no index)" "$shard" re:"offset ($hdr|$data)\b" \
  re:'truncat|cut short|ends at|unexpected end' -- run "$d" --format tar

d=$(copy_ds trunc-header)
truncate -s $((hdr + 100)) "$d/$shard"
expect_runtime "tar shard cut mid-header (no index)" "$shard" "offset $hdr" \
  re:'truncat|cut short|ends at|unexpected end' -- run "$d" --format tar

d=$(copy_ds trunc-indexed keep-index)
truncate -s $((data + size / 2)) "$d/$shard"
expect_runtime "tar shard cut mid-member, with its (now stale) index" "$shard" "offset" -- run "$d" --format tar

# Cut exactly at a header: every member left is whole, but the end-of-archive marker is gone.
# Nothing may pass silently: either an error naming the shard, or a run that warns about it.
checks=$((checks + 1))
d=$(copy_ds trunc-boundary)
truncate -s "$hdr" "$d/$shard"
run run "$d" --format tar --json "$scratch/trunc-boundary.json"
if ((rc == 124)) || grep -Eq "$crash_markers" "$out" "$err"; then
  fail "tar shard cut at a member boundary: exit $rc (hang or crash)"; show stderr "$err"
elif ((rc == 1)); then
  if grep -q "$shard" "$err"; then
    echo "ok: tar shard cut at a member boundary: error naming the shard"
  else
    fail "tar shard cut at a member boundary: exit 1 without naming $shard on stderr"; show stderr "$err"
  fi
elif ((rc == 0)); then
  if grep -h "$shard" "$out" "$err" | grep -Eqi 'end.of.archive|truncat|cut short'; then
    echo "ok: tar shard cut at a member boundary: the run warns about $shard"
  else
    fail "tar shard cut at a member boundary: exit 0 and no word about $shard (its end-of-archive marker is missing: the shard may be truncated)"
    show stderr "$err"
    show stdout "$out"
  fi
else
  fail "tar shard cut at a member boundary: exit code $rc, expected 1 (error) or 0 (with a warning)"; show stderr "$err"
fi

# --- corrupt zstd frames ---------------------------------------------------------------------------
zfiles=$scratch/files-zstd
must_gen "$zfiles" --format files --samples 20 --sample-size 20000 --compress zstd --compressibility 0.3 --seed 2
bad_file=000007.bin.zst
overwrite "$zfiles/$bad_file" $(($(stat -c %s "$zfiles/$bad_file") / 2))
if command -v zstd >/dev/null && zstd -q -t "$zfiles/$bad_file" 2>/dev/null; then
  echo "FAIL: test setup: zstd -t still accepts $zfiles/$bad_file after overwriting bytes in it"
  exit 1
fi
expect_runtime "corrupt zstd frame in a files dataset" "$bad_file" "zstd" "offset" \
  -- run "$zfiles" --json "$scratch/corrupt-files.json"
checks=$((checks + 1))
problem=$(json_check "$scratch/corrupt-files.json" "'$bad_file' in (d.get('error') or '') and d.get('interrupted') is False" \
  "the --json report of the failed run does not carry the error (naming $bad_file) in \"error\"")
if [[ -n $problem ]]; then fail "corrupt zstd frame: $problem"; else echo "ok: corrupt zstd frame: the JSON report carries the error"; fi

ztar=$scratch/tar-zstd
must_gen "$ztar" --format tar --samples 20 --sample-size 20000 --samples-per-shard 10 --compress zstd \
  --compressibility 0.3 --seed 2
read -r zhdr zdata zsize < <(member_offsets "$ztar/$shard" 4)   # 000012.bin.zst
overwrite "$ztar/$shard" $((zdata + zsize / 2))
expect_runtime "corrupt zstd member in a tar shard" "$shard" re:"offset ($zhdr|$zdata)\b" "zstd" \
  -- run "$ztar"

# --on-error skip: the bad sample is skipped and counted, every other one delivered once.
# skip_case NAME DIR SKIP_KEY OBJECT TOTAL_SAMPLES [RUN_ARGS...]: the sample SKIP_KEY (in OBJECT) is bad.
skip_case() {
  local name=$1 ds=$2 key=$3 object=$4 total=$5; shift 5
  checks=$((checks + 1))
  local json=$scratch/skip-$key.json want
  want=$("$py" "$scratch/digest.py" "$ds" --skip-key "$key")
  want=${want%% *}
  run run "$ds" --on-error skip --json "$json" "$@"
  local bad=()
  ((rc == 0)) || bad+=("exit code $rc, expected 0")
  check_no_crash "$out" "$err"
  local p
  for p in \
    "d['skipped']['samples'] == 1|skipped.samples is not 1" \
    "d['delivered']['samples'] == $((total - 1))|delivered.samples is not $((total - 1)) (all but the bad one)" \
    "d['delivered']['digest'] == $want|delivered.digest is not $want (Python's digest of every other sample)" \
    "any('$object' in e for e in d['skipped']['examples'])|skipped.examples does not name $object" \
    "d['error'] is None|\"error\" is not null"; do
    local r
    r=$(json_check "$json" "${p%%|*}" "${p#*|}")
    [[ -z $r ]] || bad+=("$r")
  done
  if ! conclude "$name: feedline run ... --on-error skip $*" "$name" stderr "$err"; then
    [[ -s $json ]] && "$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); print("    report: delivered %s skipped %s" % (d.get("delivered"), d.get("skipped")))' "$json" 2>/dev/null
  fi
}
skip_case "--on-error skip: corrupt zstd file" "$zfiles" 000007 "$bad_file" 20
skip_case "--on-error skip: corrupt zstd tar member" "$ztar" 000012 "$shard" 20

# --- not a tar file in a tar dataset -----------------------------------------------------------------
d=$(copy_ds not-tar keep-index)
head -c 30000 /dev/urandom >"$d/x.tar"
expect_runtime "random bytes named x.tar in a tar dataset" "x.tar" "offset 0" re:'not a tar|tar (archive|file)\?' \
  -- run "$d" --format tar
expect_runtime "random bytes named x.tar (format auto)" "x.tar" "offset 0" -- run "$d"
printf 'hello, I am a text file, not a tar archive\n' >"$d/x.tar"
expect_runtime "a short text file named x.tar in a tar dataset" "x.tar" "offset 0" -- run "$d" --format tar
seq 1 2000 >"$d/x.tar"  # 8.9 KB of text
expect_runtime "a text file named x.tar in a tar dataset" "x.tar" "offset 0" re:'not a tar|tar (archive|file)\?' \
  -- run "$d" --format tar

# --- empty datasets ----------------------------------------------------------------------------------
empty=$scratch/empty-dir
mkdir -p "$empty"
expect_runtime "empty directory (--format files)" "$empty" re:'no samples|empty' -- run "$empty" --format files
expect_runtime "empty directory (--format tar)" "$empty" re:'no samples|no tar shards|empty' -- run "$empty" --format tar
expect_runtime "empty directory (format auto)" "$empty" re:'no samples|empty' -- run "$empty"
only_dirs=$scratch/only-subdirs
mkdir -p "$only_dirs/a/b" "$only_dirs/c"
expect_runtime "directory of empty directories" "$only_dirs" re:'no samples|empty' -- run "$only_dirs"
empty_shard=$scratch/empty-shard
mkdir -p "$empty_shard"
"$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1], "w").close()' "$empty_shard/e.tar"
expect_runtime "a tar dataset whose only shard is empty" "$empty_shard" re:'no samples|no regular members|empty' \
  -- run "$empty_shard" --format tar

# --- a sample larger than the memory budget: the budget asked for cannot run this dataset (usage) -------
bigf=$scratch/big-files
must_gen "$bigf" --format files --samples 3 --sample-size 8MiB
expect_usage "8 MiB samples, --memory-budget 4MiB (files)" "--memory-budget" re:"big-files/00000[0-2]\.bin" \
  -- run "$bigf" --memory-budget 4MiB
expect_usage "8 MiB samples, --memory-budget 4MiB --batch-size 1 (files)" "--memory-budget" \
  re:"big-files/00000[0-2]\.bin" -- run "$bigf" --memory-budget 4MiB --batch-size 1
bigt=$scratch/big-tar
must_gen "$bigt" --format tar --samples 3 --sample-size 8MiB
expect_usage "8 MiB samples, --memory-budget 4MiB (tar)" "--memory-budget" "shard-000000.tar" \
  -- run "$bigt" --memory-budget 4MiB
# Only one sample is too big: the error names that one.
mixed=$scratch/one-big
must_gen "$mixed" --format files --samples 10 --sample-size 4KiB
head -c 8388608 /dev/urandom >"$mixed/000010.bin"
expect_usage "one 8 MiB sample among 4 KiB ones, --memory-budget 4MiB" "--memory-budget" "one-big/000010.bin" \
  -- run "$mixed" --memory-budget 4MiB --batch-size 1
expect_usage "one 8 MiB sample among 4 KiB ones, --memory-budget 4MiB --batch-size 4" "--memory-budget" \
  "one-big/000010.bin" -- run "$mixed" --memory-budget 4MiB --batch-size 4

# --- --on-error skip on bad objects (issue 3: "skips, counts and reports instead") ------------------------
# skip_object NAME DIR OBJECT ALLOWED_DELIVERED... -- RUN_ARGS...: exit 0, delivered.samples one of
# ALLOWED_DELIVERED, skipped.samples >= 1, and skipped.examples naming OBJECT.
skip_object() {
  local name=$1 ds=$2 object=$3; shift 3
  local allowed=()
  while (($# > 0)) && [[ $1 != -- ]]; do allowed+=("$1"); shift; done
  shift
  checks=$((checks + 1))
  local json=$scratch/skip-object.json
  rm -f -- "$json"
  run run "$ds" --on-error skip --json "$json" "$@"
  local bad=()
  ((rc == 0)) || bad+=("exit code $rc, expected 0")
  check_no_crash "$out" "$err"
  if ((rc == 0)); then
    local p r
    local set_expr
    set_expr=$(IFS=,; echo "${allowed[*]}")
    for p in \
      "d['delivered']['samples'] in ($set_expr,)|delivered.samples is not one of ${allowed[*]}" \
      "d['skipped']['samples'] + d['skipped'].get('objects', 0) >= 1|neither skipped.samples nor skipped.objects counts the skip" \
      "any('$object' in e for e in d['skipped']['examples'])|skipped.examples does not name $object"; do
      r=$(json_check "$json" "${p%%|*}" "${p#*|}")
      [[ -z $r ]] || bad+=("$r")
    done
  fi
  conclude "$name: feedline run $ds --on-error skip $*" "$name" stderr "$err" || true
}
d=$scratch/not-tar
head -c 30000 /dev/urandom >"$d/x.tar"
skip_object "--on-error skip: a non-tar x.tar is skipped, the good shards delivered" "$d" x.tar 30 -- --format tar
# The whole samples before the cut may be delivered (22) or the shard dropped (20).
skip_object "--on-error skip: a shard cut mid-member" "$scratch/trunc-member" "$shard" 20 22 -- --format tar
skip_object "--on-error skip: a sample larger than the budget" "$mixed" 000010.bin 10 -- --memory-budget 4MiB --batch-size 1

# --- usage errors: exit 2 ----------------------------------------------------------------------------------
expect_usage "run --batch-size 0" "--batch-size" -- run "$tar_ds" --batch-size 0
expect_usage "run --shard-shuffle with --no-shuffle" "--shard-shuffle" "--no-shuffle" -- run "$tar_ds" --shard-shuffle 4 --no-shuffle
expect_usage "run --shard-shuffle -1" "--shard-shuffle" -- run "$tar_ds" --shard-shuffle -1
expect_usage "run --shard-shuffle 100000" "--shard-shuffle" "65536" -- run "$tar_ds" --shard-shuffle 100000
expect_usage "run --on-error bogus" "--on-error" "'bogus'" "is not one of fail, skip" -- run "$tar_ds" --on-error bogus
expect_usage "run --compute-time 5parsecs" "--compute-time" "'5parsecs'" -- run "$tar_ds" --compute-time 5parsecs
expect_usage "run --compute-time normal:5ms" "--compute-time" -- run "$tar_ds" --compute-time normal:5ms
expect_usage "run --decode-cost 5parsecs" "--decode-cost" "'5parsecs'" -- run "$tar_ds" --decode-cost 5parsecs
expect_usage "run --collate-cost 1x" "--collate-cost" "'1x'" -- run "$tar_ds" --collate-cost 1x
expect_usage "run --format zip" "'zip'" "files, tar, tfrecord, npz or npy" -- run "$tar_ds" --format zip
expect_usage "run --memory-budget 12q" "--memory-budget" "'12q'" -- run "$tar_ds" --memory-budget 12q
expect_usage "run --throttle-bw fast" "--throttle-bw" "'fast'" -- run "$tar_ds" --throttle-bw fast
expect_usage "run --epochs 0" "--epochs" -- run "$tar_ds" --epochs 0
expect_usage "run --rank 3 --world-size 3" "--rank" "--world-size" -- run "$tar_ds" --rank 3 --world-size 3
expect_usage "run --decode-threads 0" "--decode-threads" -- run "$tar_ds" --decode-threads 0
expect_usage "run --decode-nice 20" "--decode-nice" -- run "$tar_ds" --decode-nice 20
expect_usage "run --decode-nice -1" "--decode-nice" -- run "$tar_ds" --decode-nice -1
expect_usage "run --io-depth 0" "--io-depth" -- run "$tar_ds" --io-depth 0
expect_usage "run --config missing file" "--config" -- run "$tar_ds" --config "$scratch/no-such.toml"
expect_usage "run without a URL" "url" -- run
expect_usage "run unknown option" "--bogus" -- run "$tar_ds" --bogus
gen_usage() {  # gen_usage NAME NEEDLE... -- GEN_ARGS... (the first GEN_ARG is the target dir)
  local name=$1; shift
  local needles=()
  while [[ $1 != -- ]]; do needles+=("$1"); shift; done
  shift
  expect_usage "$name" "${needles[@]}" -- gen "$@"
  if [[ -e $1 ]]; then
    fail "$name: the refused gen left $1 behind"
  fi
}
gen_usage "gen --sample-size normal:xx" "--sample-size" "'normal:xx'" -- "$scratch/g1" --sample-size normal:xx
gen_usage "gen --compress lz4" "--compress" "'lz4'" -- "$scratch/g2" --compress lz4
gen_usage "gen --compressibility 2" "compressibility" -- "$scratch/g3" --compressibility 2
gen_usage "gen --compress zstd:99" "zstd" "99" -- "$scratch/g4" --compress zstd:99
gen_usage "gen --format zip" "'zip'" -- "$scratch/g5" --format zip
gen_usage "gen --samples 0" "sample" -- "$scratch/g6" --samples 0
# --samples-per-shard is the old name of --samples-per-file: the error names the flag by its new one.
gen_usage "gen --samples-per-shard 0" "--samples-per-file" -- "$scratch/g7" --format tar --samples-per-shard 0
gen_usage "gen --samples-per-file 0" "--samples-per-file" -- "$scratch/g7" --format tfrecord --samples-per-file 0
gen_usage "gen --output xml" "--output" "'xml'" -- "$scratch/g8" --output xml

finish pipeline_bad_input
