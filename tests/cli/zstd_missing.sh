#!/usr/bin/env bash
# In a build without zstd (the minimal preset), asking for zstd is a clear error, not a crash:
# `gen --compress zstd` is a usage error (exit 2), and reading a dataset of .zst files fails
# with exit 1 naming the object and saying the build lacks zstd.
# Usage: zstd_missing.sh FEEDLINE SCRATCH uring|nouring
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
# A build with zstd has nothing to check here: the whole script is a skip (exit 77, which ctest
# reports as Skipped through SKIP_RETURN_CODE).
if "$bin" --version | grep -q "zstd: yes"; then
  echo "skip: this build has zstd; nothing to check"
  exit 77
fi
expect_usage "gen --compress zstd without zstd" "zstd" -- gen "$scratch/g" --compress zstd --samples 4
# A .zst file made by the zstd tool (or any bytes named .zst): the run names it.
mkdir -p "$scratch/z"
printf 'not really zstd, but named so' >"$scratch/z/000001.bin.zst"
expect_runtime "reading a .zst sample without zstd" "000001.bin.zst" "zstd" -- run "$scratch/z" --format files
finish zstd_missing
