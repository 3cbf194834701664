# shellcheck shell=bash
# Robustness section: datasets on disk that must not give silently wrong data (issue 14).
# Sourced by tests/cli/robustness.sh after tests/cli/lib.sh and cli_init: uses $bin, $scratch,
# $out, $err, $py and the lib's helpers; every check counts in $checks / $failures.
#
#  - a stale tar index (copied from another shard of the same size, a size edited by hand, the
#    old format 1 without a checksum) is not trusted: `run` exits 0 with the digest `gen` printed
#    and a note naming the index;
#  - an interrupted `gen` (a full disk; Ctrl-C: robustness/interrupts.sh) leaves a dataset `run`
#    refuses: exit 1 naming the manifest .feedline-dataset that says the generation did not finish;
#  - a generated dataset that lost a shard, or whose shard was cut short, since: exit 1 naming
#    what is missing;
#  - `gen` into a directory holding a user's own file: exit 2, the file untouched;
#  - a tar index edited by hand with its checksum recomputed: each member's header, read with it,
#    gives it away (exit 1 naming the shard, the member and the offset);
#  - a bad sample's error comes after the batches before it (a damaged TFRecord record 50: 50
#    records delivered first);
#  - a sample replaced mid-run by a FIFO, a directory or a socket: a data error naming it, never a
#    hang (files kept open, and opened in the io_uring ring);
#  - gen: a dataset larger than the free space (or 5 PiB) refused before anything is written (its
#    Ctrl-C inside a 1 GiB sample: robustness/interrupts.sh);
#  - per-entry metadata within the memory budget (an npz of 100,000 arrays; 200,000 tar members);
#  - a symlinked subdirectory and a dangling link named in notes;
#  - every format's object cut at each byte near its structure's boundaries (truncations.py).
# shellcheck disable=SC2154  # bin, scratch, out, err, rc, early, as_terminal: set by lib.sh

dataset_dir=$scratch/robustness-dataset
rm -rf -- "$dataset_dir"
mkdir -p -- "$dataset_dir"

# dataset_gen DIR GEN_ARGS...: feedline gen DIR ... --output json, which must work; sets
# dataset_digest to the digest gen reports. Returns 1 (the failure counted) when gen fails.
dataset_gen() {
  local dir=$1; shift
  checks=$((checks + 1))
  must_run "gen $dir" gen "$dir" "$@" --output json || return 1
  dataset_digest=$(json_get "$out" 'd["digest"]')
}

# dataset_run_ok NAME DIR WANT_DIGEST NOTE_NEEDLE...: feedline run DIR must exit 0, deliver
# WANT_DIGEST, and say on stdout or stderr, in one line, every NOTE_NEEDLE (fixed strings).
dataset_run_ok() {
  local name=$1 dir=$2 want=$3; shift 3
  checks=$((checks + 1))
  local json=$dataset_dir/run.json bad=()
  rm -f -- "$json"
  run run "$dir" --json "$json"
  ((rc == 0)) || bad+=("exit code $rc, expected 0")
  check_no_crash "$out" "$err"
  local r
  r=$(json_check "$json" "d['delivered']['digest'] == $want" "delivered.digest is not $want (what feedline gen wrote)")
  [[ -z $r ]] || bad+=("$r")
  if (($# > 0)); then
    local found=0 all n text
    while IFS= read -r text; do
      all=1
      for n in "$@"; do [[ $text == *"$n"* ]] || all=0; done
      if ((all)); then found=1; break; fi
    done < <(cat "$out" "$err")
    ((found)) || bad+=("no line of stdout or stderr says all of: $*")
  fi
  conclude "$name: feedline run $dir" "$name" stderr "$err" stdout "$out" || true
}

# --- stale tar indexes ---------------------------------------------------------------------------
# Fixed-size samples: every shard has the same size, so the size an index records cannot tell one
# shard's index from another's; the labels (.cls, 1 to 3 bytes) differ, so trusting a copied index
# would deliver wrong bytes.
dataset_tar=(--format tar --samples 30 --sample-size 10000 --samples-per-shard 10)
if dataset_gen "$dataset_dir/other" "${dataset_tar[@]}" --seed 7; then
  dataset_other_digest=$dataset_digest
fi
if dataset_gen "$dataset_dir/copied" "${dataset_tar[@]}" --seed 1; then
  cp -- "$dataset_dir/other/shard-000001.tar.idx" "$dataset_dir/copied/shard-000000.tar.idx"
  dataset_run_ok "an index copied from another shard of the same size" "$dataset_dir/copied" \
    "$dataset_digest" "shard-000000.tar.idx" "index"
fi
if dataset_gen "$dataset_dir/edited" "${dataset_tar[@]}" --seed 2; then
  # The first member's stored size, 10000 -> 9999, as a hand edit would do it.
  sed -i '3s/^0 512 10000 10000 /0 512 9999 9999 /' "$dataset_dir/edited/shard-000001.tar.idx"
  if grep -q '^0 512 9999 9999 ' "$dataset_dir/edited/shard-000001.tar.idx"; then
    dataset_run_ok "an index with a stored size edited by hand" "$dataset_dir/edited" \
      "$dataset_digest" "shard-000001.tar.idx" "checksum"
  else
    fail "test setup: could not edit the first member line of $dataset_dir/edited/shard-000001.tar.idx"
  fi
fi
if dataset_gen "$dataset_dir/old-index" "${dataset_tar[@]}" --seed 3; then
  # Format 1: the same member lines, no checksum line.
  for f in "$dataset_dir"/old-index/*.idx; do
    sed -i -e '1s/^feedline-tar-index 2$/feedline-tar-index 1/' -e '/^checksum /d' "$f"
  done
  dataset_run_ok "indexes of the old format 1" "$dataset_dir/old-index" "$dataset_digest" "old format 1"
fi
# The untouched dataset still opens through its indexes, with no note.
if [[ -n ${dataset_other_digest:-} ]]; then
  checks=$((checks + 1))
  run run "$dataset_dir/other" --json "$dataset_dir/run.json"
  if ((rc != 0)); then
    fail "an intact generated dataset: feedline run exit code $rc"; show stderr "$err"
  elif grep -qi "index" "$err"; then
    fail "an intact generated dataset: a note about its indexes"; show stderr "$err"
  else
    echo "ok: an intact generated dataset: run uses its indexes without a note"
  fi
fi

# A full disk: a 2 MiB tmpfs (needs root to mount; skipped otherwise).
dataset_tmpfs=$dataset_dir/tmpfs
mkdir -p -- "$dataset_tmpfs"
if mount -t tmpfs -o size=2m none "$dataset_tmpfs" 2>/dev/null; then
  # 6.4 MB into 2 MiB: refused before anything is written, naming both.
  expect_usage "gen of more than the disk holds" "needs about" "free" -- \
    gen "$dataset_tmpfs/ds" --samples 100 --sample-size 64KiB
  # Told to go ahead (a filesystem that compresses could hold it), it fills the disk.
  expect_runtime "gen onto a full disk" "No space left" -- \
    gen "$dataset_tmpfs/ds" --samples 100 --sample-size 64KiB --no-space-check
  expect_runtime "run over a gen that hit a full disk" ".feedline-dataset" "incomplete" -- run "$dataset_tmpfs/ds"
  umount "$dataset_tmpfs" || fail "could not unmount the tmpfs at $dataset_tmpfs"
else
  echo "skip: a full disk during gen (cannot mount a tmpfs at $dataset_tmpfs: not root?)"
fi

# --- a generated dataset that changed since -----------------------------------------------------
if dataset_gen "$dataset_dir/lost" "${dataset_tar[@]}" --seed 4; then
  rm -- "$dataset_dir/lost/shard-000001.tar" "$dataset_dir/lost/shard-000001.tar.idx"
  expect_runtime "run over a generated dataset that lost a shard" ".feedline-dataset" "shard-000001.tar" \
    "missing" -- run "$dataset_dir/lost"
fi
if dataset_gen "$dataset_dir/cut" "${dataset_tar[@]}" --seed 5; then
  # Cut shard 2 right after its 4th sample (8 members): a valid tar of fewer samples.
  dataset_cut=$("$py" -c 'import sys, tarfile; print(list(tarfile.open(sys.argv[1], "r:"))[8].offset)' \
    "$dataset_dir/cut/shard-000002.tar")
  rm -f -- "$dataset_dir/cut/shard-000002.tar.idx"
  truncate -s "$dataset_cut" "$dataset_dir/cut/shard-000002.tar"
  expect_runtime "run over a generated dataset whose shard was cut at a member boundary" "shard-000002.tar" \
    "holds 4 samples" ".feedline-dataset" -- run "$dataset_dir/cut"
fi

# --- gen never overwrites what it did not write ------------------------------------------------
dataset_user=$dataset_dir/user
mkdir -p -- "$dataset_user"
printf 'my own notes, not a sample\n' >"$dataset_user/000000.bin"
cp -- "$dataset_user/000000.bin" "$dataset_dir/user-copy"
expect_usage "gen into a directory holding a user's 000000.bin" "000000.bin" "not written by feedline gen" \
  -- gen "$dataset_user" --samples 5 --sample-size 100
checks=$((checks + 1))
if ! cmp -s -- "$dataset_user/000000.bin" "$dataset_dir/user-copy"; then
  fail "gen into a directory holding a user's 000000.bin: the file was changed"
elif [[ -e $dataset_user/.feedline-dataset || -e $dataset_user/000001.bin ]]; then
  fail "gen into a directory holding a user's 000000.bin: gen wrote into it: $(ls -A "$dataset_user" | tr '\n' ' ')"
else
  echo "ok: gen into a directory holding a user's 000000.bin: the file untouched, nothing written"
fi
# A dataset gen wrote may be regenerated in place (here with another seed).
if dataset_gen "$dataset_dir/again" --samples 5 --sample-size 100 --seed 1 &&
   dataset_gen "$dataset_dir/again" --samples 5 --sample-size 100 --seed 2; then
  dataset_run_ok "a generated dataset regenerated in place" "$dataset_dir/again" "$dataset_digest"
fi

# --- an edited tar index is checked member by member -------------------------------------------
# The checksum recomputed after the edit, and the edit (a stored size) on a member none of the 8
# probes looks at: each member's header, read with it, must still give it away. Without a
# manifest (a user's own dataset), nothing else would: the run must fail naming the shard, the
# member and the offset, not deliver 9,999 bytes of 10,000 for it.
dataset_edit_index() {  # dataset_edit_index IDX MEMBER_NAME NEW_SIZE
  "$py" - "$@" <<'PYEOF'
import sys, xxhash
path, name, size = sys.argv[1], sys.argv[2], sys.argv[3]
lines = open(path).read().split('\n')
n = int(lines[1].split()[3])
body = lines[2:2 + n]
for i, l in enumerate(body):
    f = l.split(' ', 4)
    if f[4] == name:
        f[2] = f[3] = size
        body[i] = ' '.join(f)
        break
else:
    sys.exit('no member ' + name)
text = '\n'.join(lines[:2] + body) + '\n'
text += 'checksum %016x\n' % xxhash.xxh3_64_intdigest(text.encode())
open(path, 'w').write(text)
PYEOF
}
if dataset_gen "$dataset_dir/rehashed" "${dataset_tar[@]}" --seed 6; then
  rm -f -- "$dataset_dir/rehashed/.feedline-dataset"
  # Shard 1 holds samples 10-19, members 0-19; the probes see members 0, 2, 5, 8, 10, 13, 16, 19.
  if dataset_edit_index "$dataset_dir/rehashed/shard-000001.tar.idx" 000012.bin 9999; then
    expect_runtime "an index edited by hand, its checksum recomputed (an unprobed member)" \
      "shard-000001.tar" "000012.bin" "at offset" "does not belong" -- \
      run "$dataset_dir/rehashed" --no-shuffle --batch-size 5
    checks=$((checks + 1))
    run run "$dataset_dir/rehashed" --on-error skip --json "$dataset_dir/rehashed.json"
    v=$(json_check "$dataset_dir/rehashed.json" "d['skipped']['samples'] == 1 and d['delivered']['samples'] == 29" \
      "expected 29 samples delivered and 1 skipped")
    if ((rc == 0)) && [[ -z $v ]]; then
      echo "ok: an edited index with --on-error skip: the member's sample skipped, the rest delivered"
    else
      fail "an edited index with --on-error skip: exit $rc; $v"; show stderr "$err"
    fi
  else
    fail "test setup: could not edit $dataset_dir/rehashed/shard-000001.tar.idx"
  fi
fi

# --- an error comes after the batches before it ------------------------------------------------
# A TFRecord file whose record 50 is damaged (its data's CRC), read in order in batches of 10:
# batches 0-4 (records 0-49) are delivered, then the error naming the file and the record's
# offset. The same order for a tar shard whose index was edited (a data error at read time).
dataset_tfr=$dataset_dir/tfrecord-damaged
if "$bin" --version | grep -q "isal: yes" && dataset_gen "$dataset_tfr" --format tfrecord --samples 100 \
     --sample-size 1000 --samples-per-file 100; then
  rm -f -- "$dataset_tfr/.feedline-dataset"
  "$py" -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[50 * 1016 + 22] ^= 0xff; open(p, "wb").write(b)' \
    "$dataset_tfr/shard-000000.tfrecord"
  expect_runtime "a damaged TFRecord record 50, batches of 10 in order" "shard-000000.tfrecord" \
    "at offset 50800" "CRC32C" -- run "$dataset_tfr" --no-shuffle --batch-size 10 --json "$dataset_dir/tfr.json"
  checks=$((checks + 1))
  v=$(json_check "$dataset_dir/tfr.json" "d['delivered']['samples'] == 50" \
    "expected the 50 records before the damaged one delivered (5 batches of 10) before the error")
  if [[ -z $v ]]; then echo "ok: a damaged record's error comes after the 5 batches before it"
  else fail "a damaged TFRecord record: $v"; fi
fi
if [[ -d $dataset_dir/rehashed ]]; then
  # Member 000012.bin is sample 12 of 30: batches of 5 in order deliver samples 0-9 first.
  run run "$dataset_dir/rehashed" --no-shuffle --batch-size 5 --json "$dataset_dir/rehashed-order.json"
  checks=$((checks + 1))
  v=$(json_check "$dataset_dir/rehashed-order.json" "d['delivered']['samples'] == 10" \
    "expected samples 0-9 (2 batches of 5) delivered before the error of sample 12")
  if ((rc == 1)) && [[ -z $v ]]; then echo "ok: a tar member's error comes after the batches before it"
  else fail "the edited index, in order: exit $rc; $v"; show stderr "$err"; fi
fi

# --- a sample replaced mid-run ------------------------------------------------------------------
# By a FIFO (an open() of it would wait for a writer for ever, deaf to Ctrl-C), a directory or a
# socket, after the listing: a data error naming it, within the run's time. Files opened one by
# one (200 files: each opened once and kept) and in the io_uring ring with their reads (5,000
# files: more than are kept open).
dataset_replace() {  # dataset_replace NAME FILES VICTIM KIND NEEDLE
  local name=$1 files=$2 victim=$3 kind=$4 needle=$5
  local dir=$dataset_dir/replaced-$kind-$files
  rm -rf -- "$dir"
  if ! dataset_gen "$dir" --samples "$files" --sample-size 4KiB; then return; fi
  rm -f -- "$dir/.feedline-dataset"
  (
    sleep 1
    rm -f -- "$dir/$victim"
    case $kind in
      fifo) mkfifo "$dir/$victim" ;;
      dir) mkdir "$dir/$victim" ;;
      socket) "$py" -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$dir/$victim" ;;
    esac
  ) &
  local setter=$!
  # An emulated accelerator's time per batch of 10: about 3 s for the whole dataset, so the victim
  # is read after it was replaced (a throttle would keep the ring from opening files).
  local compute=$((3000 * 10 / files))ms
  expect_runtime "$name" "$victim" "$needle" -- run "$dir" --no-shuffle --batch-size 10 --compute-time "$compute"
  wait "$setter" || true
}
dataset_replace "a sample replaced by a FIFO mid-run (files kept open)" 200 000180.bin fifo "named pipe (FIFO)"
dataset_replace "a sample replaced by a directory mid-run (files kept open)" 200 000180.bin dir "directory"
dataset_replace "a sample replaced by a socket mid-run (files kept open)" 200 000180.bin socket "socket"
dataset_replace "a sample replaced by a FIFO mid-run (opened in the ring)" 5000 004000.bin fifo "named pipe (FIFO)"
dataset_replace "a sample replaced by a directory mid-run (opened in the ring)" 5000 004000.bin dir "directory"

# --- gen: no room ------------------------------------------------------------------------------
# 5 PiB (--for-host 1PiB), 512 TiB (2^32 samples of 128 KiB), 4 GiB samples x 2^20: refused before
# anything is written, naming what it needs and what is free.
# (--for-host says first, in a note, how many samples it makes that.)
checks=$((checks + 1))
run gen "$dataset_dir/toolarge" --for-host 1PiB --sample-size 1GiB
if ((rc == 2)) && [[ ! -s $out ]] && tail -n 1 "$err" | grep -q "^feedline: error: .*needs about 5.00 PiB.* free"; then
  echo "ok: gen --for-host 1PiB: exit 2, naming the 5 PiB it needs and the free space"
else
  fail "gen --for-host 1PiB: exit $rc, expected 2 naming what it needs and what is free"; show stderr "$err"
fi
expect_usage "gen --samples 2^32" "needs about" "free" -- gen "$dataset_dir/toolarge" --samples 4294967296
expect_usage "gen of 10^6 files of 1 GiB as tar" "needs about" "free" -- \
  gen "$dataset_dir/toolarge" --format tar --samples 1000000 --sample-size 1GiB
checks=$((checks + 1))
if [[ -e $dataset_dir/toolarge ]]; then fail "a refused gen wrote something: $(ls -A "$dataset_dir/toolarge" | head -3)"
else echo "ok: a gen refused for room wrote nothing"; fi

# --- metadata held per entry counts against the memory budget ----------------------------------
# An npz of 100,000 arrays: the open read each array's header into a buffer of its own, all at
# once (912 MB under a 64 MiB budget); now a bounded batch at a time.
dataset_npz=$dataset_dir/npz-many
mkdir -p -- "$dataset_npz"
"$py" -c 'import numpy as np, sys; np.savez(sys.argv[1], **{"a%06d" % i: np.arange(4, dtype=np.uint8) for i in range(100000)})' \
  "$dataset_npz/big.npz"
# dataset_bounded_ok NAME LIMIT_MB -- ARGS...: feedline ARGS must exit 0 within LIMIT_MB (+ the
# fixed overhead) of max RSS, and report a peak within its budget.
dataset_bounded_ok() {
  local name=$1 limit=$2; shift 3
  checks=$((checks + 1))
  local json=$dataset_dir/bounded.json
  rm -f -- "$json"
  run_as env "$rss_env" "$timer" -q -o "$rss_file" -f %M -- "$@" --json "$json"
  local v
  v=$(json_check "$json" 'd["memory"]["peak_bytes"] <= d["memory"]["budget_bytes"]' "the report's peak is over its budget")
  if ((rc == 0)) && [[ -z $v ]]; then echo "ok: $name: exit 0, peak within the budget"
  else fail "$name: exit $rc; $v"; show stderr "$err"; fi
  check_rss "$name" "$limit"
}
dataset_bounded_ok "an npz of 100,000 arrays under a 64 MiB budget" 64 -- run "$dataset_npz" --memory-budget 64MiB
# 100,000 tiny tar samples (200,000 members) under the smallest budget: the table the run holds
# (keys, names, offsets: ~20 MB) does not fit, and that is said before anything is read.
if dataset_gen "$dataset_dir/tiny-members" --format tar --samples 100000 --sample-size 1 --samples-per-shard 50000; then
  expect_usage "200,000 tar members under a 1 MiB budget" "dataset's tables take" "memory budget" -- \
    run "$dataset_dir/tiny-members" --memory-budget 1MiB
  dataset_bounded_ok "200,000 tar members under a 64 MiB budget" 64 -- run "$dataset_dir/tiny-members" --memory-budget 64MiB
fi

# --- a symlinked subdirectory is named, not skipped without a word ---------------------------
dataset_links=$dataset_dir/links
if dataset_gen "$dataset_dir/links-target" --samples 3 --sample-size 100; then
  mkdir -p -- "$dataset_links"
  printf 'abc' >"$dataset_links/own.bin"
  ln -s -- "$dataset_dir/links-target" "$dataset_links/linked"
  ln -s -- "$dataset_dir/nothing-there" "$dataset_links/dangling.bin"
  checks=$((checks + 1))
  run run "$dataset_links" --json "$dataset_dir/links.json"
  v=$(json_check "$dataset_dir/links.json" 'd["samples"] == 1' "one sample expected (the link not followed)")
  if ((rc == 0)) && [[ -z $v ]] && grep -q "links-target\|linked" "$err" && grep -q "not followed" "$err" &&
     grep -q "dangling.bin" "$err"; then
    echo "ok: a symlinked subdirectory and a dangling link are named in notes"
  else
    fail "a symlinked subdirectory: exit $rc; $v; no note naming it"; show stderr "$err"
  fi
fi

# --- every object cut short at its structure's boundaries ---------------------------------------
# Each format's first object cut at every byte near a header, a record's framing or a zip record
# (truncations.py): exit 0 (a shorter valid dataset) or 1 naming the object, never 2, a crash or
# a hang, and --on-error skip never fails.
checks=$((checks + 1))
if "$py" "$here/robustness/truncations.py" "$bin" "$dataset_dir" \
     tar tar-index tfrecord tfrecord-index npz npy files >"$dataset_dir/truncations.log" 2>&1; then
  echo "ok: objects cut short at every structure boundary: $(tail -n 1 "$dataset_dir/truncations.log")"
else
  fail "objects cut short: $(grep -c '^FAIL' "$dataset_dir/truncations.log") format(s) misbehaved"
  grep -A5 '^FAIL' "$dataset_dir/truncations.log" | head -40
fi
