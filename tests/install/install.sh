#!/usr/bin/env bash
# Install test: `cmake --install` of this build into a scratch prefix (then moved elsewhere: the
# installed files must be relocatable), and the consumer project in consumer/ built against it
# three ways, each binary run (it reads two mem:// objects back through a Loader):
#   1. find_package(feedline) with -DCMAKE_PREFIX_PATH=<prefix>, linking feedline::loader;
#   2. `pkg-config --cflags --libs --static feedline` with PKG_CONFIG_PATH=<prefix>/<libdir>/pkgconfig;
#   3. find_package(feedline) from the build tree's export (-Dfeedline_DIR=<build dir>).
# WITHOUT lists the optional parts this build lacks (uring,zstd,http,nfs): the installed package
# must not ask for their libraries, so the find_package consumer is configured with those CMake
# packages hidden (CMAKE_DISABLE_FIND_PACKAGE_*) and the installed files may not name them.
# A sanitizer build's static libraries need the sanitizer's runtime: SANITIZE (-fsanitize=...,
# or empty) is passed to the consumer's compile and link, as an embedder of such a build must.
# usage: install.sh CMAKE BUILD_DIR SCRATCH CONSUMER_SRC CXX LIBDIR GENERATOR MAKE_PROGRAM SANITIZE WITHOUT [LAUNCHER]
set -uo pipefail
cmake=$1 build=$2 scratch=$3 src=$4 cxx=$5 libdir=$6 generator=$7 make_program=$8 sanitize=$9 without=${10}
launcher=${11:-}

rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
log=$scratch/log
fail() {
  echo "FAIL: $*"
  [[ -s $log ]] && tail -n 40 "$log"
  exit 1
}
step() { echo "== $*"; }

step "cmake --install $build --prefix $scratch/staged"
"$cmake" --install "$build" --prefix "$scratch/staged" >"$log" 2>&1 || fail "cmake --install failed"
for f in bin/feedline include/feedline/core/error.hpp include/feedline/loader/loader.hpp \
         "$libdir"/libfeedline_{core,transports,storage,loader}.a \
         "$libdir"/cmake/feedline/feedline{Config,ConfigVersion,Targets}.cmake "$libdir"/pkgconfig/feedline.pc; do
  [[ -f $scratch/staged/$f ]] || fail "not installed: $f"
done
# The CLI's RUNPATH, built and installed, holds absolute directories only: an empty element (CMake
# pads a build-tree RUNPATH with a trailing ':') or a relative one makes the dynamic loader search
# the current directory, so a library planted in a dataset's folder would load into feedline.
if command -v readelf >/dev/null; then
  for bin in "$build/tools/feedline" "$scratch/staged/bin/feedline"; do
    rp=$(readelf -d "$bin" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
    IFS=: read -r -a parts <<<"$rp:x"  # the x keeps a trailing empty element
    unset 'parts[${#parts[@]}-1]'
    for p in ${rp:+"${parts[@]}"}; do
      [[ $p == /* ]] || fail "$bin: RUNPATH '$rp' has an element that is not an absolute path ('$p')"
    done
  done
else
  echo "skip: the RUNPATH check (no readelf)"
fi
# Nothing installed may point back into the source or build tree (or the staging prefix).
root=$(cd "$src/../../.." && pwd)
if grep -rlF -e "$build" -e "$root" -e "$scratch/staged" \
     "$scratch/staged/$libdir/cmake" "$scratch/staged/$libdir/pkgconfig"; then
  fail "the installed config names the build, source or staging directory"
fi
# What this build lacks, the package must not need: its CMake package hidden from the consumer,
# its targets absent from feedlineTargets.cmake, its module absent from feedline.pc.
hide=()
for part in ${without//,/ }; do
  case $part in
    uring) targets=(PkgConfig::URING) modules=(liburing) packages=() ;;
    zstd) targets=(zstd::) modules=(libzstd) packages=(zstd) ;;
    http) targets=(CURL:: pugixml::) modules=(-lcurl pugixml) packages=(CURL pugixml) ;;
    nfs) targets=(PkgConfig::NFS) modules=(libnfs) packages=() ;;
    *) fail "unknown part in WITHOUT: $part" ;;
  esac
  for t in "${targets[@]}"; do
    ! grep -qF "$t" "$scratch"/staged/"$libdir"/cmake/feedline/feedlineTargets*.cmake ||
      fail "built without $part, but feedlineTargets.cmake links $t"
  done
  for m in "${modules[@]}"; do
    ! grep -qwF -e "$m" "$scratch/staged/$libdir/pkgconfig/feedline.pc" ||
      fail "built without $part, but feedline.pc names $m"
  done
  for p in "${packages[@]}"; do hide+=("-DCMAKE_DISABLE_FIND_PACKAGE_$p=ON"); done
done
mv "$scratch/staged" "$scratch/prefix" || exit 1
prefix=$scratch/prefix

gen_args=(-G "$generator")
[[ -n $make_program ]] && gen_args+=(-DCMAKE_MAKE_PROGRAM="$make_program")
[[ -n $launcher ]] && gen_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher")
san_flags=()
[[ -n $sanitize ]] && san_flags=("$sanitize" -fno-omit-frame-pointer)

# consumer_cmake NAME CMAKE_ARGS...: configure, build and run the CMake consumer; checks which
# feedline it found (the expected feedline_DIR is the first argument after NAME).
consumer_cmake() {
  local name=$1 want_dir=$2
  shift 2
  step "consumer ($name)"
  "$cmake" -S "$src" -B "$scratch/$name" "${gen_args[@]}" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_FLAGS="${san_flags[*]}" -DCMAKE_EXE_LINKER_FLAGS="${san_flags[*]}" "$@" >"$log" 2>&1 ||
    fail "$name: configuring the consumer failed"
  local found
  found=$(sed -n 's/^-- feedline_DIR=//p' "$log")
  [[ $(realpath -m "$found") == $(realpath -m "$want_dir") ]] ||
    fail "$name: find_package(feedline) found $found, not $want_dir"
  "$cmake" --build "$scratch/$name" >"$log" 2>&1 || fail "$name: building the consumer failed"
  "$scratch/$name/consumer" >"$log" 2>&1 || fail "$name: the consumer failed (exit $?)"
  grep -q "2 samples read back intact" "$log" || fail "$name: unexpected consumer output"
  cat "$log"
}

consumer_cmake find_package "$prefix/$libdir/cmake/feedline" -DCMAKE_PREFIX_PATH="$prefix" "${hide[@]}"

step "consumer (pkg-config --static)"
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
pc=$(pkg-config --cflags --libs --static feedline 2>"$log") || fail "pkg-config --static feedline failed"
echo "pkg-config: $pc"
include_ok=0
for word in $pc; do
  [[ $word == -I* && $(realpath -m "${word#-I}") == $(realpath -m "$prefix/include") ]] && include_ok=1
done
((include_ok)) || fail "pkg-config gave no -I for $prefix/include"
# shellcheck disable=SC2086 # the flags are words
$launcher "$cxx" -std=c++23 "${san_flags[@]}" "$src/main.cpp" $pc -o "$scratch/consumer-pc" >"$log" 2>&1 ||
  fail "compiling the consumer with pkg-config's flags failed"
"$scratch/consumer-pc" >"$log" 2>&1 || fail "pkg-config: the consumer failed (exit $?)"
grep -q "2 samples read back intact" "$log" || fail "pkg-config: unexpected consumer output"
cat "$log"

consumer_cmake build_tree "$build" -Dfeedline_DIR="$build" "${hide[@]}"
echo "ok: installed, relocated, and used through find_package, pkg-config and the build tree's export"
