# shellcheck shell=bash
# shellcheck disable=SC2154  # bin, scratch, out, err, rc, early, as_terminal: set by lib.sh
# Robustness section (sourced by tests/cli/robustness.sh): Ctrl-C (and SIGTERM) end every wait
# within a second, with 130 (143), whatever the command waits on: a throttle, a planted cost, a
# compute step, a dataset's open, gen laying out samples or inside a 1 GiB sample, bench's
# --create, a network server that never answers or sends a byte a second, an NFS server that never
# answers. Each exit is timed to the millisecond, so this section runs alone on the machine
# (ctest: cli.robustness.interrupts, RUN_SERIAL); the others run beside other tests.

int_dir=$scratch/interrupts
rm -rf -- "$int_dir"
mkdir -p -- "$int_dir"
ds=$int_dir/ds  # 40 tar samples of 4 KiB in 4 shards, with indexes
must_gen "$ds" --format tar --samples 40 --sample-size 4KiB --samples-per-shard 10 --seed 1
head -c 1048576 /dev/urandom >"$int_dir/one-mib.bin"

# --- commands that wait on local work -----------------------------------------------------------
expect_interrupt "SIGINT while throttled to 1 byte/s" --json "$int_dir/int-bw.json" -- run "$ds" --throttle-bw 1 --json "$int_dir/int-bw.json"
expect_interrupt "SIGINT with an hour of added latency" --json "$int_dir/int-lat.json" -- run "$ds" --throttle-latency 1h --json "$int_dir/int-lat.json"
expect_interrupt "SIGINT in an hour of decode cost" --json "$int_dir/int-dec.json" -- run "$ds" --decode-cost 1h --json "$int_dir/int-dec.json"
expect_interrupt "SIGINT in a 5 s compute step" --after 2 --json "$int_dir/int-comp.json" -- run "$ds" --compute-time 5s --batch-size 4 --json "$int_dir/int-comp.json"
expect_interrupt "SIGTERM in a 5 s compute step" --term --after 2 -- run "$ds" --compute-time 5s --batch-size 4
expect_interrupt "SIGINT in a 1 h collate cost" -- run "$ds" --collate-cost 1h
expect_interrupt "SIGINT while opening a dataset at 1 byte/s" --json "$int_dir/int-open.json" -- run "$ds" --no-index --throttle-bw 1 --json "$int_dir/int-open.json"
expect_interrupt "SIGINT in diagnose's baseline" --after 2 --json "$int_dir/int-diag.json" -- diagnose "$ds" --throttle-bw 1 --json "$int_dir/int-diag.json"
expect_interrupt "SIGINT during --stages-alone" --after 3 -- run "$ds" --stages-alone --decode-cost 1s --epochs 1 --batch-size 40
expect_interrupt "SIGINT while gen lays out samples" -- gen "$int_dir/int-gen" --samples 100000 --sample-size 64KiB
expect_interrupt "SIGINT during bench --create" -- bench storage "$int_dir/int-create.bin" --create 4GiB
rm -f "$int_dir/int-create.bin"
expect_interrupt "SIGINT in an hour-long bench" -- bench storage "$int_dir/one-mib.bin" --bs 64k --runtime 1h --time-based

# --- interrupted gen ---------------------------------------------------------------------------
# Ctrl-C: a gen of 3 GiB is stopped after a second; what it left must not pass for a dataset.
dataset_int=$int_dir/interrupted
checks=$((checks + 1))
"${as_terminal[@]}" "$bin" gen "$dataset_int" --format tar --samples 200000 --sample-size 16KiB \
  --samples-per-shard 1000 >"$int_dir/gen.out" 2>"$int_dir/gen.err" &
dataset_pid=$!
if started "$dataset_pid" 1; then
  bad=()
  interrupt_pid "$dataset_pid"
  check_sigint_exit "$int_dir/gen.out" "$int_dir/gen.err"
  conclude "Ctrl-C during gen" "Ctrl-C during gen: exit 130" stderr "$int_dir/gen.err" || true
  if [[ -e $dataset_int/shard-000000.tar ]]; then
    expect_runtime "run over a gen interrupted by Ctrl-C" ".feedline-dataset" "incomplete" -- run "$dataset_int"
    expect_runtime "run --format files over a gen interrupted by Ctrl-C" ".feedline-dataset" -- \
      run "$dataset_int" --format files
  else
    fail "Ctrl-C during gen: no shard written in a second (too slow to test what an interrupted gen leaves)"
  fi
else
  fail "Ctrl-C during gen: feedline gen of 200000 samples exited (code $early) within 1 s, before the signal"
  show stderr "$int_dir/gen.err"
fi
rm -rf -- "$dataset_int"


# --- gen: Ctrl-C inside a large sample -----------------------------------------------------------
# A sample of 1 GiB is drawn, written (and compressed) in chunks of 8 MiB with the stop checked
# between them: Ctrl-C ends gen within a second, not after the sample.
# (3 GiB: where the disk has less room, the space check would refuse it before the signal.)
rm -rf -- "$int_dir/huge"
if (($(df -Pk -- "$int_dir" | awk 'NR == 2 {print $4}') >= 8 * 1024 * 1024)); then
  expect_interrupt "Ctrl-C during gen of 1 GiB samples" --after 2 -- \
    gen "$int_dir/huge" --samples 3 --sample-size 1GiB
  rm -rf -- "$int_dir/huge"
  if "$bin" --version | grep -q "zstd: yes"; then
    expect_interrupt "Ctrl-C during gen of 1 GiB zstd samples" --after 3 -- \
      gen "$int_dir/huge" --samples 3 --sample-size 1GiB --compress zstd --compressibility 0.5
    rm -rf -- "$int_dir/huge"
  fi
else
  echo "skip: Ctrl-C during gen of 1 GiB samples (less than 8 GiB free under $int_dir)"
fi

# Two shards of 100 MiB without indexes: their headers are scanned when Ctrl-C comes.
checks=$((checks + 1))  # the gen must work, as every gen of the dataset section
if must_run "gen $int_dir/scan" gen "$int_dir/scan" --format tar --samples 3200 --sample-size 64KiB --samples-per-shard 1600; then
  rm -f -- "$int_dir"/scan/*.idx "$int_dir/scan/.feedline-dataset"
  expect_interrupt "Ctrl-C while the dataset opens" --after 1 -- run "$int_dir/scan" --throttle-bw 10MiB
  checks=$((checks + 1))
  e=$scratch/Ctrl-C_while_the_dataset_opens.err
  if grep -q "interrupted while opening the dataset" "$e" && ! grep -q "cancelled at offset" "$e"; then
    echo "ok: Ctrl-C while the dataset opens says so, naming it"
  else
    fail "Ctrl-C while the dataset opens: stderr does not say 'interrupted while opening the dataset'"
    show stderr "$e"
  fi
fi

# --- network storage that never lets a request finish ------------------------------------------
net=$int_dir/network
mkdir -p -- "$net"
# shellcheck source=/dev/null
source "$here/robustness/net_servers.sh"
if [[ ${FEEDLINE_TEST_HAVE_HTTP:-0} != 1 ]]; then
  echo "skip: HTTP/S3 cases: this feedline was built without the HTTP object-store backend"
else
  # Ctrl-C while the server has accepted and answers nothing: the HEADs of a URL list, a
  # listing, a bench's HEAD. Each exits 130 within a second (not after the 30 s stall timeout).
  net_server silent silent
  silent=http://127.0.0.1:$net_port
  expect_interrupt "SIGINT, HTTP server never answers, run" --json "$net/int-silent-run.json" \
    -- run "$silent/x/{0..3}.bin" --json "$net/int-silent-run.json"
  expect_interrupt "SIGINT, HTTP server never answers, run of a directory URL" -- run "$silent/x/"
  expect_interrupt "SIGINT, HTTP server never answers, bench storage" -- bench storage "$silent/x.bin"
  expect_interrupt "SIGTERM, HTTP server never answers, bench storage" --term -- bench storage "$silent/x.bin"
  export AWS_ACCESS_KEY_ID=AKIDROBUSTNESS AWS_SECRET_ACCESS_KEY=robustness-secret-key AWS_REGION=us-east-1
  expect_interrupt "SIGINT, S3 endpoint never answers, run (ListObjectsV2)" -- run "s3://bucket/prefix/" --endpoint "$silent"
  expect_interrupt "SIGINT, S3 endpoint never answers, bench storage (HEAD)" -- bench storage "s3://bucket/obj.bin" --endpoint "$silent"
  unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION

  # Ctrl-C while the server sends a byte a second: the reads are cancelled.
  net_server trickle trickle $((64 << 20))
  trickle=http://127.0.0.1:$net_port
  expect_interrupt "SIGINT, HTTP server sends 1 byte per s, bench storage" --after 1.5 -- bench storage "$trickle/big.bin"
  expect_interrupt "SIGINT, HTTP server sends 1 byte per s, bench storage randread" --after 1.5 \
    -- bench storage "$trickle/big.bin" --rw randread --bs 4k --iodepth 8
  net_server trickle-small trickle 65536
  expect_interrupt "SIGINT, HTTP server sends 1 byte per s, run" --after 1.5 --json "$net/int-trickle-run.json" \
    -- run "http://127.0.0.1:$net_port/d/{0..3}.bin" --format files --json "$net/int-trickle-run.json"
  # After --runtime's deadline too (the reads in flight then get a second): within a second.
  expect_interrupt "SIGINT after --runtime, HTTP server sends 1 byte per s, bench storage" --after 1.6 \
    -- bench storage "$trickle/big.bin" --runtime 1s --time-based
  # Interrupted with a password in the URL: the partial report and the JSON hide it too.
  net_secrets=("hunter2pass")
  expect_interrupt "SIGINT with a password in the URL" --json "$net/pw-int.json" \
    -- run "http://user:hunter2pass@127.0.0.1:${silent##*:}/x/{0..3}.bin" --json "$net/pw-int.json"
  no_secret "SIGINT with a password in the URL" "$scratch/SIGINT with a password in the URL.out" \
    "$scratch/SIGINT with a password in the URL.err" "$net/pw-int.json"
fi
if [[ ${FEEDLINE_TEST_HAVE_NFS:-0} == 1 ]]; then
  # An NFS server that accepts and never answers (the silent server above, or a new one).
  net_server nfs-silent silent
  expect_interrupt "SIGINT, NFS server never answers, run" \
    -- run "nfs://127.0.0.1/export/ds?version=4&nfsport=$net_port"
  expect_interrupt "SIGINT, NFS server never answers, bench storage" \
    -- bench storage "nfs://127.0.0.1/export/ds/x.bin?version=4&nfsport=$net_port"
fi

for p in "${net_pids[@]}"; do kill "$p" 2>/dev/null || true; done
for p in "${net_pids[@]}"; do wait "$p" 2>/dev/null || true; done
net_pids=()
