#!/usr/bin/env bash
# CLI test: the GPU path on a machine that may have no GPU.
#  - `feedline probe` prints one JSON document with gpu/cufile/io_uring, and agrees with the
#    machine (no GPU here: available false and a reason).
#  - `run --gpu-direct auto` on an uncompressed files dataset takes the host-direct path (copy
#    amplification 0) and `off` the bounce path (amplification >= 1), with the same digest; the
#    direct path also with --direct (O_DIRECT: no bounce copies either). Indexed zstd tar shards
#    decode in place with auto and bounce with off, same digest.
#  - bad input gets one clear error line and exit 2: --device foo, --device cuda:7 with no GPU,
#    --gpu-direct on where it is impossible (tar, zstd), --gpu-direct maybe.
#
# usage: gpu_path.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
run_timeout=60

# --- probe ---------------------------------------------------------------------------------------
checks=$((checks + 1))
if must_run "probe --output json" probe --output json; then
  cp "$out" "$scratch/probe.json"
  bad=()
  for want in \
    "isinstance(d['gpu']['available'], bool) and isinstance(d['gpu']['reason'], str) and isinstance(d['gpu']['devices'], list)" \
    "isinstance(d['cufile']['available'], bool)" \
    "isinstance(d['io_uring']['available'], bool) and d['io_uring']['compiled_in'] == ('$mode' == 'uring')" \
    "d['gpu']['available'] or len(d['gpu']['reason']) > 0" \
    "d['gpu']['available'] == (len(d['gpu']['devices']) > 0)" \
    "d['memcpy']['bytes_per_second'] > 0"; do
    msg=$(json_check "$scratch/probe.json" "$want" "probe JSON: not true: $want")
    [[ -z $msg ]] || bad+=("$msg")
  done
  conclude "probe --output json" "probe: one JSON document with gpu, cufile, io_uring" stdout "$scratch/probe.json" || true
fi
has_gpu=$(json_get "$scratch/probe.json" "d['gpu']['available']" 2>/dev/null || echo False)
checks=$((checks + 1))
if must_run "probe (text)" probe; then
  bad=()
  grep -q "^  gpu: " "$out" || bad+=("no gpu line")
  grep -q "^  io_uring: " "$out" || bad+=("no io_uring line")
  grep -q "^  cufile: " "$out" || bad+=("no cufile line")
  conclude "probe (text)" "probe: text report" stdout "$out" || true
fi

# --- data paths ----------------------------------------------------------------------------------
must_gen "$scratch/files" --format files --samples 300 --sample-size lognormal:40KiB:20KiB --seed 5
tar_compress=none  # zstd members where this build has zstd (the minimal build has not)
if "$bin" --version | grep -q "zstd: yes"; then tar_compress=zstd; fi
must_gen "$scratch/tar" --format tar --samples 100 --sample-size 8KiB --seed 5 --compress "$tar_compress" --compressibility 0.5

run_path() {  # run_path NAME ARGS...: run, JSON in $scratch/NAME.json
  local name=$1; shift
  checks=$((checks + 1))
  must_run "$name" run "$scratch/files" --batch-size 16 --epochs 2 --json "$scratch/$name.json" "$@" || return 1
}
if run_path direct --gpu-direct auto && run_path bounce --gpu-direct off && run_path odirect --gpu-direct on --direct; then
  bad=()
  for want in \
    "d['data_paths'][0]['path'] == 'host-direct'" \
    "d['data_paths'][0]['copy_amplification'] == 0" \
    "d['data_paths'][0]['copied_bytes'] == 0" \
    "d['data_paths'][0]['bytes'] == d['bytes'] > 0"; do
    msg=$(json_check "$scratch/direct.json" "$want" "direct: not true: $want")
    [[ -z $msg ]] || bad+=("$msg")
    msg=$(json_check "$scratch/odirect.json" "$want" "O_DIRECT direct: not true: $want")
    [[ -z $msg ]] || bad+=("$msg")
  done
  msg=$(json_check "$scratch/bounce.json" "d['data_paths'][0]['path'] == 'bounce' and d['data_paths'][0]['copy_amplification'] >= 1" \
        "bounce: path or amplification wrong")
  [[ -z $msg ]] || bad+=("$msg")
  d1=$(json_get "$scratch/direct.json" "d['delivered']['digest']")
  d2=$(json_get "$scratch/bounce.json" "d['delivered']['digest']")
  d3=$(json_get "$scratch/odirect.json" "d['delivered']['digest']")
  [[ $d1 == "$d2" && $d1 == "$d3" ]] || bad+=("digests differ: direct $d1, bounce $d2, O_DIRECT direct $d3")
  grep -q "data path: host-direct" "$out" || bad+=("the text report does not name the data path")
  conclude "data paths" "data paths: host-direct (x0 copies, also O_DIRECT) and bounce (>= x1), same digest" \
    direct "$scratch/direct.json" || true
fi
checks=$((checks + 1))
if must_run "tar auto" run "$scratch/tar" --batch-size 16 --json "$scratch/tar.json" &&
   must_run "tar off" run "$scratch/tar" --batch-size 16 --gpu-direct off --json "$scratch/tar-off.json"; then
  bad=()
  # Indexed shards: no direct read (several members, zstd), but decode writes each sample into
  # its batch slot; with zstd only the small stored .cls members are copied. off: the bounce path.
  max_amp=$([[ $tar_compress == zstd ]] && echo 0.1 || echo 1.01)
  msg=$(json_check "$scratch/tar.json" "d['data_paths'][0]['path'] == 'decode-in-place' and 'several members' in d['data_path']['reason'] and d['data_paths'][0]['copy_amplification'] < $max_amp" \
        "tar: auto should decode in place (zstd: copying only stored members) and say why it cannot read in place")
  [[ -z $msg ]] || bad+=("$msg")
  msg=$(json_check "$scratch/tar-off.json" "d['data_paths'][0]['path'] == 'bounce' and d['data_paths'][0]['copy_amplification'] >= 1" \
        "tar --gpu-direct off: bounce, amplification >= 1")
  [[ -z $msg ]] || bad+=("$msg")
  t1=$(json_get "$scratch/tar.json" "d['delivered']['digest']")
  t2=$(json_get "$scratch/tar-off.json" "d['delivered']['digest']")
  [[ $t1 == "$t2" ]] || bad+=("tar digests differ: decode-in-place $t1, bounce $t2")
  conclude "tar auto" "tar shards: decode in place (auto) and bounce (off), same digest" json "$scratch/tar.json" || true
fi

# --- bad input -----------------------------------------------------------------------------------
expect_usage "--device foo" "--device" "foo" "cuda:N" -- run "$scratch/files" --device foo
expect_usage "--gpu-direct maybe" "--gpu-direct" "maybe" -- run "$scratch/files" --gpu-direct maybe
expect_usage "--gpu-direct on with tar" "--gpu-direct on" "several members" -- run "$scratch/tar" --gpu-direct on
expect_usage "--cuda-streams 0" "--cuda-streams" -- run "$scratch/files" --cuda-streams 0
expect_usage "probe --output xml" "--output" "xml" -- probe --output xml
if [[ $has_gpu == False ]]; then
  expect_usage "--device cuda:7 with no GPU" "cuda:7" "no usable GPU" -- run "$scratch/files" --device cuda:7
  expect_usage "--device cuda:0 with no GPU" "cuda:0" "no usable GPU" -- run "$scratch/files" --device cuda:0
  expect_runtime "probe --h2d-bench with no GPU" "no GPU" -- probe --h2d-bench
else
  expect_usage "--device cuda:99" "cuda:99" "CUDA device" -- run "$scratch/files" --device cuda:99
fi

finish gpu_path
