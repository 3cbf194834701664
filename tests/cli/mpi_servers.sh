#!/usr/bin/env bash
# CLI test: MPI jobs over network storage, `mpirun -np R feedline run s3://... | nfs://...` with
# 2 and 3 ranks x 2 accelerators against a real S3-compatible server (s3rver) and a real NFS
# server (nfs-ganesha): every rank reads its own shard over its own connections, and the job's
# digest, summed over the ranks by rank 0, is the one `feedline gen` recorded (verified).
#
# usage: mpi_servers.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring] [NFS_PORT]
#   FEEDLINE_TEST_HAVE_HTTP=1 / FEEDLINE_TEST_HAVE_NFS=1 (set by CTest for builds with those
#   backends) choose the parts; needs mpirun (openmpi-bin), s3rver (tests/servers/setup.sh) and
#   nfs-ganesha (scripts/install-deps.sh --test).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
source "$here/../servers/servers.sh"
cli_init "$@"
servers_cleanup_on_exit
nfs_port=${4:-20495}
run_timeout=180

if ! command -v mpirun >/dev/null || ! "$bin" --version | grep -q "mpi: yes"; then
  echo "SKIP: no MPI here (mpirun, and feedline built with it: scripts/install-deps.sh)"
  exit 77
fi
if [[ ${FEEDLINE_TEST_HAVE_HTTP:-0} != 1 && ${FEEDLINE_TEST_HAVE_NFS:-0} != 1 ]]; then
  echo "SKIP: this build has neither s3:// nor nfs://"
  exit 77
fi
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Every rank is on this host: shared memory only. (Open MPI's TCP transport, loaded otherwise,
# takes its own two locks in both orders in MPI_Init: ThreadSanitizer reports it.)
export OMPI_MCA_btl=self,vader
# Under ASan: whole stacks for every allocation, so that LeakSanitizer's suppressions
# (tests/lsan.supp) recognise what Open MPI's components keep after MPI_Finalize.
if [[ -n ${ASAN_OPTIONS:-} ]]; then export ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0; fi

# job_verified NAME RANKS URL ARGS...: mpirun -np RANKS feedline run URL --accelerators 2 ARGS,
# and rank 0's document must say the summed digest is gen's.
job_verified() {
  local name=$1 ranks=$2 url=$3; shift 3
  checks=$((checks + 1))
  local json=$scratch/job.json
  rm -f "$json"
  rc=0
  timeout "$run_timeout" "${mpi[@]}" -np "$ranks" "$bin" run "$url" --accelerators 2 \
    --batch-size 8 --compute-time 1ms --json "$json" "$@" >"$out" 2>"$err" || rc=$?
  local v
  v=$(json_check "$json" "(
len(d['ranks']) == $ranks and d['accelerators'] == $ranks * 2
and d['delivered']['verified'] is True and d['error'] is None
and all(len(r['per_accelerator']) == 2 for r in d['ranks'])
and sum(r['samples'] for r in d['ranks']) == d['samples'] == d['dataset']['samples'])" \
    "the job's digest was not verified")
  if ((rc == 0)) && [[ -z $v ]]; then
    echo "ok: $name"
  else
    fail "$name: exit $rc ${v}"
    show stdout "$out"
    show stderr "$err"
  fi
}

if [[ ${FEEDLINE_TEST_HAVE_HTTP:-0} == 1 ]]; then
  s3port=$(free_port)
  start_s3rver "$scratch/s3rver-data" "$s3port" || { echo "FAIL: s3rver did not start"; exit 1; }
  s3_env "$s3port"
  awscli s3 mb s3://bench >/dev/null 2>&1 || { echo "FAIL: aws-cli could not make the bucket"; exit 1; }
  must_gen s3://bench/ds/ --endpoint "$s3_endpoint" --format tar --samples 240 \
    --sample-size 6KiB --samples-per-shard 40 --seed 3
  for ranks in 2 3; do
    job_verified "s3://: $ranks ranks x 2 accelerators" "$ranks" s3://bench/ds/ \
      --endpoint "$s3_endpoint"
  done
fi

if [[ ${FEEDLINE_TEST_HAVE_NFS:-0} == 1 ]]; then
  server=$here/../servers/ganesha.sh
  state=$scratch/ganesha
  bash "$server" start "$state" "$scratch/export" "$nfs_port" ||
    { echo "FAIL: nfs-ganesha did not start"; exit 1; }
  trap 'bash "$server" stop "$state"; stop_servers' EXIT
  nfs="nfs://127.0.0.1/export/ds?version=4&nfsport=$nfs_port"
  must_gen "$nfs" --format tar --samples 240 --sample-size 6KiB --samples-per-shard 40 --seed 4
  for ranks in 2 3; do
    job_verified "nfs://: $ranks ranks x 2 accelerators" "$ranks" "$nfs"
  done
fi

finish mpi_servers.sh
