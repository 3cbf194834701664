#!/usr/bin/env bash
# Packs a built feedline for a GPU machine that lacks its build dependencies (a CUDA image with
# nvcc and PyTorch but no liburing, libcurl, libnfs, Open MPI ...): the CLI, the GPU test binary
# and, where built, the Python package, with every shared library they load except glibc's own.
# CUDA is not packed: feedline loads the machine's libcudart and libcufile at run time.
# Then on the GPU machine: scripts/gpu-check.sh --bundle DIR
#
# usage: scripts/gpu-bundle.sh [BUILD_DIR [OUT_DIR]]   (defaults: build/release, build/gpu-bundle)
#   FEEDLINE_PY_BUILD: a second build tree whose python/feedline to pack instead (one configured
#   for the GPU machine's Python, e.g. -DPython_EXECUTABLE=.../python3.12)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build=${1:-build/release}
out=${2:-build/gpu-bundle}
for f in "$build/tools/feedline" "$build/tests/gpu/feedline_gpu_tests"; do
  [[ -x $f ]] || { echo "gpu-bundle: $f is not built (cmake --build $build)" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp "$build/tools/feedline" "$build/tests/gpu/feedline_gpu_tests" "$out/bin/"
objects=("$out/bin/feedline" "$out/bin/feedline_gpu_tests")
py_build=${FEEDLINE_PY_BUILD:-$build}
if [[ -d $py_build/python/feedline ]]; then
  cp -rL "$py_build/python/feedline" "$out/python-feedline"
  mkdir -p "$out/python" && mv "$out/python-feedline" "$out/python/feedline"
  find "$out/python" -name __pycache__ -prune -exec rm -rf {} +
  while IFS= read -r m; do objects+=("$m"); done < <(find "$out/python" -name '_feedline*.so')
fi
# glibc's libraries stay the machine's own (they must match its dynamic loader); every other
# library the objects load travels, libstdc++ included (GCC 12's; a newer one there would do too).
glibc='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|ld-linux-x86-64)\.so'
for o in "${objects[@]}"; do
  ldd "$o" | awk '/=> \//{print $3}'
done | sort -u | while IFS= read -r lib; do
  name=$(basename "$lib")
  [[ $name =~ $glibc || $name == libpython* ]] && continue
  cp -L "$lib" "$out/lib/$name"
done
# Debug info stays here: the bundle travels (a few MiB instead of ~100).
find "$out" -type f \( -name '*.so*' -o -path "$out/bin/*" \) -exec strip --strip-debug {} +
du -sh "$out" | awk '{print "gpu-bundle: " $1 " in " $2}'
echo "gpu-bundle: $(ls "$out/lib" | wc -l) libraries; python package: $([[ -d $out/python ]] && echo yes || echo no)"
