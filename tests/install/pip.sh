#!/usr/bin/env bash
# Install test of the Python package: `pip install ./python` into a fresh venv, from this build
# folder (FEEDLINE_BUILD_DIR: its targets are built, so pip only packs them), then what a venv
# user relies on: `import feedline` is the venv's copy, the `feedline` command is on the venv's
# PATH, and the two agree (a dataset `feedline gen` wrote, read by feedline.Loader, adds up to
# the manifest's digest). Then `pip wheel`: the wheel installs into a second venv with no build
# folder in sight (the module and the command need no file of the build tree: no RPATH into it)
# and works there.
# usage: pip.sh PYTHON BUILD_DIR SOURCE_DIR SCRATCH
set -uo pipefail
python=$1 build=$2 src=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
log=$scratch/log
fail() {
  echo "FAIL: $*"
  [[ -s $log ]] && tail -n 40 "$log"
  exit 1
}
"$python" -c "import ensurepip" 2>/dev/null ||
  { echo "skip: $python has no venv module (python3-venv)"; exit 77; }

# check_venv VENV: the venv's feedline and its command work, and agree.
check_venv() {
  local venv=$1
  [[ -x $venv/bin/feedline ]] || fail "no feedline command in $venv/bin"
  "$venv/bin/feedline" --version >"$log" 2>&1 || fail "$venv/bin/feedline --version failed"
  local where
  where=$(cd "$scratch" && "$venv/bin/python" -c "import feedline; print(feedline.__file__)" 2>"$log") ||
    fail "import feedline failed in $venv"
  [[ $where == "$venv"/* ]] || fail "import feedline found $where, not the venv's copy"
  rm -rf "$scratch/ds"
  PATH=$venv/bin:$PATH feedline gen "$scratch/ds" --format tar --samples 64 --sample-size 1k \
    --samples-per-shard 16 >"$log" 2>&1 || fail "the venv's feedline gen failed"
  (cd "$scratch" && "$venv/bin/python" - "$scratch/ds" >"$log" 2>&1 <<'PY'
import sys, feedline
want = int([l.split()[1] for l in open(sys.argv[1] + "/.feedline-dataset") if l.startswith("digest ")][0])
loader = feedline.Loader(sys.argv[1], batch_size=16)
n = sum(len(b) for b in loader)
d = loader.report()["delivered"]
assert n == 64 and d["digest"] == want and d["verified"] is True, (n, d, want)
PY
  ) || fail "feedline.Loader in $venv did not deliver gen's dataset"
}

echo "== a build requirement that is missing is named before anything is built"
if out=$(cd "$scratch" && env PATH=/nonexistent "$python" "$src/python/setup.py" dist_info 2>&1); then
  fail "setup.py went on without cmake, ninja or a compiler on PATH"
fi
[[ $out == *"missing:"*"cmake (Debian: apt install cmake)"*"ninja (Debian: apt install ninja-build)"* ]] ||
  { echo "$out" >"$log"; fail "setup.py's refusal does not name cmake and ninja"; }
echo "ok: without cmake, ninja and c++ on PATH, setup.py names them and stops"

echo "== pip install ./python into a venv (FEEDLINE_BUILD_DIR=$build)"
"$python" -m venv --system-site-packages "$scratch/venv" >"$log" 2>&1 || fail "python -m venv failed"
start=$SECONDS
FEEDLINE_BUILD_DIR=$build "$scratch/venv/bin/pip" install --no-build-isolation --no-index \
  --no-deps "$src/python" >"$log" 2>&1 || fail "pip install ./python failed"
echo "ok: installed in $((SECONDS - start)) s"
check_venv "$scratch/venv"
echo "ok: import feedline and the feedline command, from the venv, agree on a dataset"

echo "== pip wheel ./python, installed into a fresh venv"
FEEDLINE_BUILD_DIR=$build "$scratch/venv/bin/pip" wheel --no-build-isolation --no-index --no-deps \
  -w "$scratch/dist" "$src/python" >"$log" 2>&1 || fail "pip wheel ./python failed"
wheel=$(ls "$scratch"/dist/feedline-*.whl 2>/dev/null | head -n 1)
[[ -n $wheel ]] || fail "pip wheel made no feedline wheel"
"$python" -m zipfile -l "$wheel" >"$log" 2>&1 || fail "the wheel is not a zip"
grep -q "feedline/_bin/feedline" "$log" || fail "the wheel has no feedline/_bin/feedline"
"$python" -m zipfile -e "$wheel" "$scratch/unpacked" >/dev/null 2>&1 || fail "the wheel does not unpack"
for f in $("$python" -m zipfile -l "$wheel" | awk '/_feedline.*\.so|_bin\/feedline/ {print $1}'); do
  # System directories (Open MPI's own) may be there; nothing of this build or source tree.
  rpath=$(readelf -d "$scratch/unpacked/$f" 2>/dev/null | grep -E "R(UN)?PATH" || true)
  if [[ $rpath == *"$build"* || $rpath == *"$src"* ]]; then
    fail "$f in the wheel looks for libraries in the build tree: $rpath"
  fi
done
"$python" -m venv --system-site-packages "$scratch/fresh" >"$log" 2>&1 || fail "python -m venv failed"
"$scratch/fresh/bin/pip" install --no-index --no-deps "$wheel" >"$log" 2>&1 ||
  fail "installing the wheel into a fresh venv failed"
check_venv "$scratch/fresh"
echo "ok: the wheel installs into a fresh venv and works there"
