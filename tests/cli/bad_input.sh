#!/usr/bin/env bash
# CLI test: every bad input to `feedline bench storage` gets one clear line on stderr
# ("feedline: error: ..." naming the path, option or scheme and what to do), the exit code of the
# README's rule (2 for bad usage, nothing on stdout; 1 when the storage says no: a missing or
# unreadable path, a server that cannot be reached), no crash and no hang.
#
# usage: bad_input.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
#   SCRATCH_DIR is wiped and recreated; it must be on a real disk (O_DIRECT).
#   The third argument says whether the binary was built with io_uring (default: uring).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
run_timeout=20
show_max_lines=0  # failure reports show the whole output

# --- inputs ------------------------------------------------------------------------------------
good=$scratch/good.bin      # 64 KiB of data: valid for every option, so option errors are the only problem
head -c 65536 /dev/urandom >"$good"
small=$scratch/small.bin    # 100 bytes: smaller than one 4 KiB block
head -c 100 /dev/urandom >"$small"
empty=$scratch/empty.bin
: >"$empty"
missing=$scratch/no/such/file.bin
dir=$scratch/a-directory
mkdir -p "$dir"

# --- paths -------------------------------------------------------------------------------------
# A path that is not there, or not readable, is a failure of the storage (exit 1), as for `run`;
# one of the wrong kind for the command (a directory, a device, too small) is bad usage (exit 2).
expect_runtime "nonexistent path" "$missing" "No such file" "check the path" -- bench storage "$missing"
expect_usage "directory" "$dir" "directory" "name a file" -- bench storage "$dir"
expect_usage "directory (file:// URL)" "$dir" "directory" -- bench storage "file://$dir"
expect_usage "file smaller than one block" "$small" "100 bytes" "smaller than one block" "--bs" \
  -- bench storage "$small" --bs 4k
expect_usage "zero-length file" "$empty" "empty" "--create" -- bench storage "$empty"
expect_usage "--size larger than the file" "$good" "--size" "65536" \
  -- bench storage "$good" --size 1MiB --bs 4k
expect_usage "character device" "/dev/null" "not a regular file" -- bench storage /dev/null
# A FIFO must be refused, not opened: open(O_RDONLY) on a FIFO blocks until a writer appears.
fifo=$scratch/a-fifo
if mkfifo "$fifo" 2>/dev/null; then
  expect_usage "named pipe (FIFO)" "$fifo" "not a regular file" -- bench storage "$fifo"
else
  echo "skip: named pipe (FIFO): mkfifo failed on this filesystem"
fi

# --- permission denied ---------------------------------------------------------------------------
# root bypasses file modes, so as root drop to uid/gid 65534 with setpriv; the file and the binary
# must then be reachable by that user (directories on the way need o+x).
permdir=$scratch/perm
mkdir -p "$permdir"
chmod 0755 "$scratch" "$permdir"
noperm=$permdir/mode-000.bin
head -c 65536 /dev/urandom >"$noperm"
chmod 000 "$noperm"
restore_modes=()
restore() {
  local entry
  for entry in "${restore_modes[@]}"; do chmod "${entry%%:*}" "${entry#*:}" 2>/dev/null || true; done
}
trap restore EXIT
as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
nobody_can_reach() { "${as_nobody[@]}" test -x "$permdir" -a -x "$bin" 2>/dev/null; }
if [[ $(id -u) == 0 ]]; then
  if ! command -v setpriv >/dev/null; then
    echo "skip: permission denied: running as root and setpriv (util-linux) is not installed"
  else
    if ! nobody_can_reach; then
      # Give o+x to the directories above the scratch dir and the binary that lack it (restored on exit).
      for start in "$permdir" "$(dirname -- "$bin")"; do
        d=$start
        while [[ $d != / ]]; do
          m=$(stat -c %a "$d")
          if ! [[ $(stat -c %A "$d") == *[xt] ]]; then
            chmod o+x "$d" && restore_modes+=("$m:$d")
          fi
          d=$(dirname -- "$d")
        done
      done
    fi
    if nobody_can_reach; then
      expect_runtime "permission denied (as uid 65534)" --as "${as_nobody[@]}" --needles \
        "$noperm" "Permission denied" "permissions" -- bench storage "$noperm"
    else
      echo "skip: permission denied: uid 65534 cannot reach $permdir or $bin"
    fi
  fi
else
  if [[ -r $noperm ]]; then
    echo "skip: permission denied: a mode-000 file is still readable (CAP_DAC_OVERRIDE?)"
  else
    expect_runtime "permission denied" "$noperm" "Permission denied" "permissions" -- bench storage "$noperm"
  fi
fi

# --- URLs ----------------------------------------------------------------------------------------
expect_usage "unknown URL scheme" "foo://x/y" "'foo'" "supported:" -- bench storage foo://x/y
if [[ ${FEEDLINE_TEST_HAVE_HTTP:-0} == 1 ]]; then  # set by ctest for builds with libcurl
  expect_runtime "s3:// endpoint that does not resolve" "s3://bucket/key" "resolve" "--endpoint" \
    -- bench storage s3://bucket/key --endpoint http://no-such-host.invalid:9
  expect_usage "s3:// endpoint that is not http(s)" "--endpoint" "http:// or https://" \
    -- bench storage s3://bucket/key --endpoint ftp://127.0.0.1/
else
  expect_usage "s3:// compiled out" "s3://bucket/key" "'s3'" "not available in this build" \
    -- bench storage s3://bucket/key
fi
if [[ ${FEEDLINE_TEST_HAVE_NFS:-0} == 1 ]]; then  # set by ctest for builds with libnfs
  expect_runtime "nfs:// server that does not resolve" "nfs://host/export/f" "cannot reach" "is the server up?" \
    -- bench storage nfs://host/export/f
else
  expect_usage "nfs:// compiled out" "nfs://host/export/f" "'nfs'" "not available in this build" \
    -- bench storage nfs://host/export/f
fi
expect_usage "file:// with a host" "file://host/x" "file:///" -- bench storage file://host/x
expect_usage "empty URL" "empty URL" -- bench storage ""
expect_usage "no URL" "url" "required" "--help" -- bench storage

# --- options -------------------------------------------------------------------------------------
expect_usage "--bs not a multiple of 4 KiB with --direct" "--bs 6000" "4 KiB" "--direct" \
  -- bench storage "$good" --bs 6000 --direct
expect_usage "malformed --bs" "--bs" "'4x'" "examples:" -- bench storage "$good" --bs 4x
expect_usage "malformed --size" "--size" "'12q'" "examples:" -- bench storage "$good" --size 12q
expect_usage "negative --create" "--create" "'-1'" "examples:" -- bench storage "$good" --create -1
expect_usage "malformed --runtime" "--runtime" "'10parsecs'" "examples:" \
  -- bench storage "$good" --runtime 10parsecs
expect_usage "unknown --rw" "--rw" "'write'" "read or randread" -- bench storage "$good" --rw write
expect_usage "unknown --engine" "engine" "'foo'" "uring, posix or auto" -- bench storage "$good" --engine foo
expect_usage "--iodepth 0" "--iodepth" "1..65536" -- bench storage "$good" --iodepth 0
expect_usage "--time-based without --runtime" "--time-based" "--runtime" \
  -- bench storage "$good" --time-based
expect_usage "--bs 0" "--bs" "positive" -- bench storage "$good" --bs 0
expect_usage "--bs over the 1 GiB request limit" "block size" "--bs" -- bench storage "$good" --bs 2G
expect_usage "--runtime 0s" "--runtime" "positive" -- bench storage "$good" --runtime 0s
expect_usage "unknown --output" "--output" "'xml'" "text or json" -- bench storage "$good" --output xml
expect_usage "--iodepth_batch above --iodepth" "--iodepth_batch" -- bench storage "$good" --iodepth_batch 64
expect_usage "unknown option" "--bogus" -- bench storage "$good" --bogus
expect_usage "no subcommand" "subcommand" -- bench

# --- help ----------------------------------------------------------------------------------------
checks=$((checks + 1))
run --help
if ((rc != 0)); then
  fail "feedline --help: exit code $rc, expected 0"; show stderr "$err"
elif ! grep -q bench "$out"; then
  fail "feedline --help: the help text on stdout does not mention the 'bench' command"; show stdout "$out"
else
  echo "ok: feedline --help"
fi

# --- io_uring ------------------------------------------------------------------------------------
if [[ $mode == nouring ]]; then
  expect_usage "--engine uring in a build without io_uring" "built without io_uring" "--engine posix" \
    -- bench storage "$good" --engine uring --bs 4k
else
  checks=$((checks + 1))
  # Does the kernel let us use io_uring at all? (auto falls back to posix, with a note, if not.)
  run bench storage "$good" --bs 4k --output json
  auto_engine=$(json_get "$out" 'd["engine"]' 2>/dev/null || echo "?")
  run bench storage "$good" --engine uring --bs 4k --output json
  if [[ $auto_engine == posix ]]; then
    # io_uring is refused here (seccomp, io_uring_disabled): --engine uring must fail cleanly.
    if ((rc == 0 || rc == 124)) || grep -Eq "$crash_markers" "$out" "$err" || ! grep -q "io_uring" "$err"; then
      fail "--engine uring where the kernel refuses io_uring: expected a clean error naming io_uring (exit $rc)"
      show stderr "$err"
    else
      echo "ok: --engine uring where the kernel refuses io_uring fails cleanly (exit $rc)"
    fi
  elif ((rc != 0)); then
    fail "--engine uring on a valid file: exit code $rc, expected 0"; show stderr "$err"
  elif ! engine=$(json_get "$out" 'd["engine"]'); then
    fail "--engine uring on a valid file: stdout is not a JSON report"; show stdout "$out"
  elif [[ $engine != uring ]]; then
    fail "--engine uring on a valid file: the report says engine '$engine'"
  else
    echo "ok: --engine uring works on a valid file"
  fi
fi

finish bad_input
