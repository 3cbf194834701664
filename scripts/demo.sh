#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run feedline's main job on an
# embedded default. It generates (once) a resnet50-like dataset in a scratch folder — 12,800
# samples of 114,660 bytes in TFRecord files of 1,251 records, as MLPerf Storage's resnet50 has
# them, with DALI-style indexes — and runs it through `feedline run` with an emulated accelerator
# (MLPerf Storage's resnet50 settings: batch 400, 224 ms of compute per step on an H100, AU target
# 90%), ending with the stall report and writing an HTML report and a trace of the run for Perfetto; then it asks how many such accelerators the disk feeds
# (`bench accelerators`, O_DIRECT, under a minute).
# Idempotent: the build and the dataset are reused when present.
# Environment: FEEDLINE_SCRATCH (default ./.scratch), FEEDLINE_SAMPLES (default 12800: every trial
# of the search below can measure, up to its 16 accelerators: each gets 2 full batches of 400 an
# epoch, 16 x 2 x 400; bench accelerators runs no trial a dataset is too small for).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
# The CLI, and the Python module where the build has it (python3-dev and pybind11-dev, which
# install-deps.sh installs): `PYTHONPATH=build/release/python /usr/bin/python3 -c "import feedline"`
# works right after this script.
targets=(feedline)
if cmake --build build/release --target help | grep -q '^_feedline:'; then targets+=(_feedline); fi
cmake --build build/release --target "${targets[@]}"

bin=build/release/tools/feedline
scratch=${FEEDLINE_SCRATCH:-.scratch}
samples=${FEEDLINE_SAMPLES:-12800}
ds="$scratch/resnet50-tfrecord-$samples"
if [[ ! -f "$ds/.complete" ]]; then
  rm -rf "$ds"
  "$bin" gen "$ds" --format tfrecord --samples "$samples" --sample-size 114660 \
    --samples-per-file 1251 --seed 1
  touch "$ds/.complete"
fi
echo
"$bin" run "$ds" --config configs/workloads/resnet50.toml --json "$scratch/last-run.json" \
  --trace "$scratch/last-run.trace.json" --html "$scratch/last-run.html"
echo
echo "JSON report: $scratch/last-run.json"
echo "HTML report: $scratch/last-run.html (open it in a browser: one file, nothing fetched)"
echo "Trace: $scratch/last-run.trace.json (open it in https://ui.perfetto.dev or chrome://tracing)"
# The storage engineer's question of this machine's own disk: how many such accelerators it feeds
# at AU >= 90%, with O_DIRECT so that the page cache does not answer for the disk. Bounded: 4 s
# trials, at most 16 accelerators (at most 9 trials), 2 GiB of memory shared between them.
echo
"$bin" bench accelerators "$ds" --config configs/workloads/resnet50.toml --direct \
  --trial-time 4s --max-accelerators 16 --memory-budget 2GiB --json "$scratch/last-bench.json"
echo "JSON report: $scratch/last-bench.json"
if [[ -f build/release/python/feedline/__init__.py ]] && compgen -G "build/release/python/feedline/_feedline*.so" >/dev/null; then
  echo
  echo "Python: PYTHONPATH=build/release/python /usr/bin/python3 -c 'import feedline' (docs/PYTHON.md)"
fi
