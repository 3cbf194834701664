#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run feedline's main job on an
# embedded default — a 1 GiB file of random data in a scratch folder, read with
# `feedline bench storage` (sequential 1 MiB direct reads, then random 4 KiB direct reads).
# Idempotent: the build and the test file are reused when present.
# Environment: FEEDLINE_SCRATCH (default ./.scratch), FEEDLINE_RUNTIME (default 10s).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build build/release --target feedline

scratch=${FEEDLINE_SCRATCH:-.scratch}
runtime=${FEEDLINE_RUNTIME:-10s}
mkdir -p "$scratch"
file="$scratch/feedline-1GiB.bin"
direct=(--direct)
# O_DIRECT is refused by tmpfs and some overlay filesystems: fall back to buffered reads there.
if ! dd if=/dev/zero of="$scratch/.direct-probe" bs=4096 count=1 oflag=direct status=none 2>/dev/null; then
  echo "note: $scratch does not support O_DIRECT; running buffered reads" >&2
  direct=()
fi
rm -f "$scratch/.direct-probe"

bin=build/release/tools/feedline
"$bin" bench storage "$file" --create 1GiB --rw read --bs 1MiB --iodepth 32 "${direct[@]}" \
  --runtime "$runtime" --time-based
echo
"$bin" bench storage "$file" --rw randread --bs 4KiB --iodepth 32 "${direct[@]}" \
  --runtime "$runtime" --time-based
