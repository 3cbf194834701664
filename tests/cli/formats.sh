#!/usr/bin/env bash
# CLI test: MLPerf Storage's formats (TFRecord, npz, npy) against independent writers and readers.
#  - npz written by numpy's own np.savez (ZIP64 extra fields, many dtypes, big-endian, strings,
#    scalars, empty arrays) and npy by np.save; TFRecord files written here in Python from the
#    format's definition, CRCs by python3-crc32c, with DALI tfrecord2idx-style indexes and without,
#    and TensorFlow's extension-less names: `feedline run`'s delivered.digest must equal Python's
#    sum of XXH3-64 over every array's C-order bytes (np.load) or every record's data, over every
#    data path (the default, --gpu-direct off, --direct, --no-index, several storage threads).
#  - what feedline gen writes: np.load reads its npz and npy (array x the sample, y the label),
#    Python's reader checks every TFRecord CRC and finds the records gen's .idx lists, and the
#    digests agree with gen's.
#  - damage: a record's data CRC or length CRC flipped, a record cut short, an index stale or
#    corrupt or missing, np.savez_compressed, Python-object, structured and Fortran-order arrays:
#    one error line naming the file (and the record's offset, or the array), exit 1 for damage
#    (2 for what feedline does not read); with --on-error skip the damage is counted and skipped.
#
# usage: formats.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
#   Needs /usr/bin/python3 with numpy, crc32c (python3-crc32c) and xxhash (python3-xxhash). A
#   build without ISA-L has no TFRecord: the script then checks npy only and says what it skipped.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/lib.sh"
cli_init "$@"
require_xxhash
for mod in numpy crc32c; do
  if ! "$py" -c "import $mod" 2>/dev/null; then
    echo "FAIL: $py cannot import $mod (scripts/install-deps.sh installs python3-numpy and, with --test, python3-crc32c)"
    exit 1
  fi
done
isal=1
"$bin" --version | grep -q "isal: yes" || isal=0

# --- the independent side ------------------------------------------------------------------------
cat >"$scratch/pyfmt.py" <<'PYEOF'
"""Writers and readers of the formats, from their definitions (numpy for npz/npy)."""
import glob, io, json, os, struct, sys
import numpy as np, xxhash
# numpy's header layout (64-byte alignment, room for the first axis to grow) is that of 1.22 on.
SAME_BYTES = tuple(int(p) for p in np.__version__.split(".")[:2]) >= (1, 22)
try:
    import crc32c
except ImportError:
    crc32c = None

def mask(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def frame(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", mask(crc32c.crc32c(n))) + data + struct.pack("<I", mask(crc32c.crc32c(data)))

def records(path):
    """(offset, data) of every record, both CRCs checked."""
    out, b, at = [], open(path, "rb").read(), 0
    while at < len(b):
        (n,) = struct.unpack_from("<Q", b, at)
        (lc,) = struct.unpack_from("<I", b, at + 8)
        assert lc == mask(crc32c.crc32c(b[at:at + 8])), "%s: length CRC at %d" % (path, at)
        data = b[at + 12:at + 12 + n]
        assert len(data) == n, "%s: record at %d cut short" % (path, at)
        (dc,) = struct.unpack_from("<I", b, at + 12 + n)
        assert dc == mask(crc32c.crc32c(data)), "%s: data CRC at %d" % (path, at)
        out.append((at, data))
        at += 16 + n
    return out

def tfrecord2idx(path):
    """DALI's tfrecord2idx index text: 'offset length' per record, length the framed record."""
    return "".join("%d %d\n" % (at, 16 + len(d)) for at, d in records(path))

def h(b):
    return xxhash.xxh3_64_intdigest(b)

def digest(root, fmt, skip_offsets=()):
    """Sum of XXH3-64 over every member, and the member count."""
    total = members = 0
    for path in sorted(glob.glob(os.path.join(root, "**", "*"), recursive=True)):
        base = os.path.basename(path)
        if os.path.isdir(path) or base.startswith(".") or base.endswith(".idx"):
            continue
        if fmt == "npz" and path.endswith(".npz"):
            with np.load(path) as z:
                for k in z.files:
                    total += h(np.ascontiguousarray(z[k]).tobytes()); members += 1
        elif fmt == "npy" and path.endswith(".npy"):
            total += h(np.load(path).tobytes()); members += 1
        elif fmt == "tfrecord":
            for at, d in records(path):
                if (base, at) in skip_offsets:
                    continue
                total += h(d); members += 1
    return total % 2**64, members

def main():
    cmd = sys.argv[1]
    if cmd == "digest":
        skips = set()
        for s in sys.argv[4:]:
            name, at = s.rsplit(":", 1); skips.add((name, int(at)))
        print(*digest(sys.argv[2], sys.argv[3], skips))
    elif cmd == "tfrecords":  # ROOT FILES RECORDS [noext]: random records, with indexes
        root, files, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        noext = len(sys.argv) > 5
        os.makedirs(root, exist_ok=True)
        rng = np.random.default_rng(5)
        for f in range(files):
            name = ("train-%05d-of-%05d" % (f, files)) if noext else ("part-%d.tfrecord" % f)
            with open(os.path.join(root, name), "wb") as out:
                for r in range(n):
                    size = int(rng.choice([0, 1, 15, 16, 17, 4095, 4096, int(rng.integers(1, 70000))]))
                    out.write(frame(rng.bytes(size)))
            if not noext:
                with open(os.path.join(root, name + ".idx"), "w") as idx:
                    idx.write(tfrecord2idx(os.path.join(root, name)))
    elif cmd == "npz":  # ROOT: archives of many dtypes and shapes, by np.savez
        root = sys.argv[2]; os.makedirs(root, exist_ok=True)
        rng = np.random.default_rng(3)
        for i in range(12):
            np.savez(os.path.join(root, "s%03d.npz" % i),
                     img=rng.integers(0, 255, (3, int(rng.integers(1, 50)), 4), dtype=np.uint8),
                     label=np.int64(i), weights=rng.random((5, 3)).astype(">f8"),
                     words=np.array(["ab", "cde"]), flags=rng.random(7) > 0.5,
                     empty=np.zeros((0, 3), np.float32), half=rng.random(9).astype(np.float16))
    elif cmd == "npy":  # ROOT
        root = sys.argv[2]; os.makedirs(root, exist_ok=True)
        rng = np.random.default_rng(4)
        arrays = [rng.random((4, 5)), rng.integers(0, 9, 100, dtype=np.int32), np.float32(2.5),
                  np.array(["x", "yz"]), np.zeros(0, np.uint8), rng.random(33).astype("<c8")]
        for i, a in enumerate(arrays):
            np.save(os.path.join(root, "a%02d.npy" % i), a)
    elif cmd == "check-gen":  # ROOT FMT DIGEST LABEL: what gen wrote, read by numpy / Python
        root, fmt, want, label = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
        problems = []
        if fmt == "tfrecord":
            for path in sorted(glob.glob(os.path.join(root, "*.tfrecord"))):
                if open(path + ".idx").read() != tfrecord2idx(path):
                    problems.append("%s.idx is not what tfrecord2idx makes" % path)
        elif fmt in ("npz", "npy"):
            for path in sorted(glob.glob(os.path.join(root, "*." + fmt))):
                if fmt == "npz":
                    with np.load(path) as z:
                        if sorted(z.files) != (["x", "y"] if label else ["x"]):
                            problems.append("%s holds %s" % (path, z.files))
                        elif z["x"].dtype != np.uint8 or z["x"].ndim != 1:
                            problems.append("%s: x is %s of shape %s" % (path, z["x"].dtype, z["x"].shape))
                        elif label and (z["y"].dtype != np.int64 or z["y"].shape != ()):
                            problems.append("%s: y is %s of shape %s" % (path, z["y"].dtype, z["y"].shape))
                        elif SAME_BYTES:
                            # numpy's own np.savez of the same arrays writes the same bytes.
                            again = io.BytesIO()
                            np.savez(again, **{k: z[k] for k in z.files})
                            if again.getvalue() != open(path, "rb").read():
                                problems.append("%s differs from numpy's np.savez of its arrays" % path)
                else:
                    a = np.load(path)
                    if a.dtype != np.uint8 or a.ndim != 1:
                        problems.append("%s: %s of shape %s" % (path, a.dtype, a.shape))
        got = digest(root, fmt)[0]
        if got != want:
            problems.append("Python's digest of what gen wrote is %d, gen said %d" % (got, want))
        print("\n".join(problems))
    elif cmd == "flip":  # FILE OFFSET: one byte flipped
        path, at = sys.argv[2], int(sys.argv[3])
        with open(path, "r+b") as f:
            f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x20]))
    elif cmd == "offsets":  # FILE: the records' offsets
        print(" ".join(str(at) for at, _ in records(sys.argv[2])))
    elif cmd == "bad-arrays":  # ROOT
        root = sys.argv[2]
        for sub in ("compressed", "object", "structured", "fortran", "fortran-npz"):
            os.makedirs(os.path.join(root, sub), exist_ok=True)
        np.savez_compressed(os.path.join(root, "compressed", "c.npz"), pixels=np.arange(100))
        np.save(os.path.join(root, "object", "o.npy"), np.array([1, "x"], dtype=object), allow_pickle=True)
        np.save(os.path.join(root, "structured", "s.npy"), np.zeros(4, dtype=[("a", "<i4"), ("b", "<f8")]))
        np.save(os.path.join(root, "fortran", "f.npy"), np.asfortranarray(np.zeros((3, 4))))
        np.savez(os.path.join(root, "fortran-npz", "f.npz"), ok=np.zeros(3), colmajor=np.asfortranarray(np.ones((2, 5))))

main()
PYEOF
pyfmt() { "$py" "$scratch/pyfmt.py" "$@"; }
want_of() { local line; line=$(pyfmt digest "$@"); want=${line%% *}; want_members=${line##* }; }

# run_digest NAME DIR WANT MEMBERS [RUN_ARGS...]: two epochs over DIR deliver 2 x WANT.
run_digest() {
  local name=$1 ds=$2 want1=$3 members=$4; shift 4
  checks=$((checks + 1))
  local json=$scratch/run.json full
  rm -f -- "$json"
  full=$(times2 "$want1")
  must_run "$name" run "$ds" --batch-size 3 --epochs 2 --json "$json" "$@" || return 0
  local bad=() r
  for p in "d['delivered']['digest'] == $full|delivered.digest is not Python's $full (2 x $want1)" \
           "d['delivered']['verified'] in (None, True)|delivered.verified is false" \
           "d['error'] is None|error is not null"; do
    r=$(json_check "$json" "${p%%|*}" "${p#*|}")
    [[ -z $r ]] || bad+=("$r")
  done
  conclude "$name: feedline run ${*@Q}" "$name: digest matches Python's ($members members, 2 epochs)" stderr "$err" || true
}
times2() { "$py" -c 'import sys; print(2 * int(sys.argv[1]) % 2**64)' "$1"; }

# --- npz and npy written by numpy ----------------------------------------------------------------
pyfmt npz "$scratch/np-npz"
want_of "$scratch/np-npz" npz
for args in "" "--format npz" "--gpu-direct off" "--direct" "--storage-threads 3 --io-depth 5"; do
  read -ra extra <<<"$args"
  run_digest "numpy np.savez archives ${args:-(auto)}" "$scratch/np-npz" "$want" "$want_members" "${extra[@]}"
done
pyfmt npy "$scratch/np-npy"
want_of "$scratch/np-npy" npy
for args in "" "--gpu-direct off" "--direct"; do
  read -ra extra <<<"$args"
  run_digest "numpy np.save arrays ${args:-(auto)}" "$scratch/np-npy" "$want" "$want_members" "${extra[@]}"
done

# --- refused arrays: one line naming the file and the array -------------------------------------
pyfmt bad-arrays "$scratch/bad"
expect_usage "np.savez_compressed" "c.npz" "compressed npz is not supported" "array 'pixels'" -- run "$scratch/bad/compressed"
expect_usage "a Python-object array" "o.npy" "'|O'" "Python objects" -- run "$scratch/bad/object"
expect_usage "a structured array" "s.npy" "structured dtype" -- run "$scratch/bad/structured"
expect_usage "a Fortran-order array" "f.npy" "Fortran order" -- run "$scratch/bad/fortran"
expect_usage "a Fortran-order array in an npz" "f.npz" "array 'colmajor'" "Fortran order" -- run "$scratch/bad/fortran-npz"

# --- gen's npz and npy, read by numpy ---------------------------------------------------------------
for fmt in npz npy; do
  [[ $fmt == npz && $isal == 0 ]] && { echo "skip: gen --format npz: this build has no ISA-L (zip's CRC-32)"; continue; }
  for label in 1 0; do
    checks=$((checks + 1))
    ds=$scratch/gen-$fmt-$label
    extra=()
    ((label)) || extra=(--no-label)
    must_run "gen $fmt" gen "$ds" --format "$fmt" --samples 17 --sample-size uniform:1:30000 --seed 4 "${extra[@]}" --output json || continue
    gen_digest=$(json_get "$out" 'd["digest"]')
    problems=$(pyfmt check-gen "$ds" "$fmt" "$gen_digest" "$label")
    if [[ -n $problems ]]; then fail "gen $fmt (label $label): numpy disagrees"; sed 's/^/    - /' <<<"$problems"; else echo "ok: gen $fmt (label $label): np.load reads every file (npz: byte for byte numpy's own np.savez of its arrays); digest $gen_digest agrees"; fi
    want_of "$ds" "$fmt"
    run_digest "gen $fmt (label $label): run" "$ds" "$want" "$want_members"
  done
done
expect_usage "gen npz with several samples per file" "--samples-per-file" "one sample per file" -- gen "$scratch/g-spf" --format npz --samples-per-file 4

if ((isal == 0)); then
  expect_usage "run over TFRecord files without ISA-L" "built without ISA-L" "TFRecord CRC32C" -- run "$scratch/np-npy" --format tfrecord
  expect_usage "gen --format tfrecord without ISA-L" "built without ISA-L" -- gen "$scratch/g-tf" --format tfrecord --samples 3
  echo "skip: TFRecord checks: this build has no ISA-L"
  finish formats
  exit 0
fi

# --- TFRecord written in Python ------------------------------------------------------------------
pyfmt tfrecords "$scratch/py-tf" 3 40
want_of "$scratch/py-tf" tfrecord
for args in "" "--format tfrecord" "--no-index" "--gpu-direct off" "--direct" "--storage-threads 3 --io-depth 5"; do
  read -ra extra <<<"$args"
  run_digest "Python TFRecord files ${args:-(auto)}" "$scratch/py-tf" "$want" "$want_members" "${extra[@]}"
done
checks=$((checks + 1))
if json_get "$scratch/run.json" 'd["dataset"]["open_reads"]' >/dev/null && ! grep -q "index" "$err"; then
  echo "ok: Python TFRecord files: their tfrecord2idx-style indexes were used (no note)"
else
  fail "Python TFRecord files: a note says an index was not used"; show stderr "$err"
fi
# TensorFlow's own names carry no extension: --format tfrecord reads every object.
pyfmt tfrecords "$scratch/py-tf-noext" 2 25 noext
want_of "$scratch/py-tf-noext" tfrecord
run_digest "TFRecord files named train-00000-of-00002" "$scratch/py-tf-noext" "$want" "$want_members" --format tfrecord
checks=$((checks + 1))
if grep -q "2 of 2 TFRecord files have no index" "$err"; then echo "ok: TFRecord files without indexes: a note says they were scanned"; else fail "TFRecord files without indexes: no note says they were scanned"; show stderr "$err"; fi

# --- gen's TFRecord, read by Python --------------------------------------------------------------
checks=$((checks + 1))
ds=$scratch/gen-tf
if must_run "gen tfrecord" gen "$ds" --format tfrecord --samples 60 --sample-size uniform:1:20000 --samples-per-file 20 --seed 8 --output json; then
  gen_digest=$(json_get "$out" 'd["digest"]')
  problems=$(pyfmt check-gen "$ds" tfrecord "$gen_digest" 0)
  if [[ -n $problems ]]; then fail "gen tfrecord: Python's reader disagrees"; sed 's/^/    - /' <<<"$problems"; else echo "ok: gen tfrecord: every CRC right, each .idx is tfrecord2idx's, digest $gen_digest agrees"; fi
  run_digest "gen tfrecord: run" "$ds" "$gen_digest" 60
fi

# --- damaged TFRecord files ----------------------------------------------------------------------
# Record 9 of part-1 (not among the 8 records the index probes: 0, 5, 11, ... of 40).
tfd=$scratch/tf-damage
cp -r -- "$scratch/py-tf" "$tfd"
read -ra offs <<<"$(pyfmt offsets "$tfd/part-1.tfrecord")"
victim=${offs[9]}
want_of "$tfd" tfrecord
full=$want
want_of "$tfd" tfrecord "part-1.tfrecord:$victim"
pyfmt flip "$tfd/part-1.tfrecord" $((victim + 12))  # its first data byte (or, if empty, its CRC)
expect_runtime "a record's data CRC" "part-1.tfrecord" "offset $victim" "data CRC32C" -- run "$tfd"
skip_digest() {
  local name=$1 ds=$2 wantd=$3 delivered=$4 what=$5; shift 5
  checks=$((checks + 1))
  local json=$scratch/skip.json
  rm -f -- "$json"
  run run "$ds" --on-error skip --batch-size 4 --json "$json" "$@"
  local bad=() r
  ((rc == 0)) || bad+=("exit code $rc, expected 0")
  check_no_crash "$out" "$err"
  for p in "d['delivered']['digest'] == $wantd|delivered.digest is not $wantd (every other record)" \
           "d['delivered']['samples'] == $delivered|delivered.samples is not $delivered" \
           "$what" \
           "any('part-1.tfrecord' in e for e in d['skipped']['examples'])|skipped.examples does not name part-1.tfrecord"; do
    r=$(json_check "$json" "${p%%|*}" "${p#*|}")
    [[ -z $r ]] || bad+=("$r")
  done
  conclude "$name" "$name" stderr "$err" || true
}
skip_digest "a record's data CRC, --on-error skip: counted and skipped" "$tfd" "$want" 119 \
  "d['skipped']['samples'] == 1|skipped.samples is not 1"
pyfmt flip "$tfd/part-1.tfrecord" $((victim + 12))  # repaired
# Its length's CRC: the index still fits, so the decode step finds it; without the index the scan does.
pyfmt flip "$tfd/part-1.tfrecord" $((victim + 9))
expect_runtime "a record's length CRC (indexed)" "part-1.tfrecord" "offset $victim" "length field" -- run "$tfd"
skip_digest "a record's length CRC (indexed), --on-error skip" "$tfd" "$want" 119 \
  "d['skipped']['samples'] == 1|skipped.samples is not 1"
expect_runtime "a record's length CRC (scanned)" "part-1.tfrecord" "offset $victim" "length field" -- run "$tfd" --no-index
# Scanned: the records before it are kept, the file's rest is skipped as a damaged object.
want_kept=$("$py" "$scratch/pyfmt.py" digest "$scratch/py-tf" tfrecord $(for o in "${offs[@]:9}"; do printf 'part-1.tfrecord:%s ' "$o"; done))
skip_digest "a record's length CRC (scanned), --on-error skip" "$tfd" "${want_kept%% *}" 89 \
  "d['skipped']['objects'] == 1|skipped.objects is not 1" --no-index
pyfmt flip "$tfd/part-1.tfrecord" $((victim + 9))  # repaired

# Truncated: the last record runs past the file's end.
cp -r -- "$scratch/py-tf" "$scratch/tf-cut"
size=$(stat -c %s "$scratch/tf-cut/part-2.tfrecord")
truncate -s $((size - 2)) "$scratch/tf-cut/part-2.tfrecord"
expect_runtime "a truncated record (its index stale)" "part-2.tfrecord" "truncated" -- run "$scratch/tf-cut"
rm -f -- "$scratch/tf-cut/part-2.tfrecord.idx"
expect_runtime "a truncated record (no index)" "part-2.tfrecord" "truncated" -- run "$scratch/tf-cut"

# Stale and corrupt indexes: noted, the files scanned, the digest right.
cp -r -- "$scratch/py-tf" "$scratch/tf-idx"
echo "0 16" >"$scratch/tf-idx/part-0.tfrecord.idx"
printf 'not an index\n' >"$scratch/tf-idx/part-2.tfrecord.idx"
want_of "$scratch/tf-idx" tfrecord
run_digest "stale and corrupt TFRecord indexes" "$scratch/tf-idx" "$want" "$want_members"
checks=$((checks + 1))
if grep -q "part-0.tfrecord.idx.*stale" "$err" && grep -q "part-2.tfrecord.idx" "$err"; then
  echo "ok: stale and corrupt TFRecord indexes: a note names each"
else
  fail "stale and corrupt TFRecord indexes: the notes do not name both"; show stderr "$err"
fi

finish formats
