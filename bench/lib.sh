# shellcheck shell=bash
# Helpers shared by the benchmark drivers (bench/compare-fio.sh, bench/pipeline.sh), which set
# bench_name (the prefix of their messages) and source this file:
#   here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
#   source "$here/lib.sh"
# It sets repo (the repository root), python (Debian's python3, which the drivers need) and
# feedline (build/release/tools/feedline if present, else build/dev/tools/feedline).
# The functions read the drivers' variables (bench_name, pairs, jobs, usage):
# shellcheck disable=SC2154

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="/usr/bin/python3"
if [[ -x "$repo/build/release/tools/feedline" ]]; then
  feedline="$repo/build/release/tools/feedline"
else
  feedline="$repo/build/dev/tools/feedline"
fi

# die MESSAGE...: "<bench_name>: error: MESSAGE" on stderr, exit 2.
die() { echo "$bench_name: error: $*" >&2; exit 2; }

# parse_options "VALUE_OPTIONS" "FLAG_OPTIONS" ARGS...: the command line. For each name in the
# space-separated VALUE_OPTIONS, `--name VALUE` and `--name=VALUE` set the variable of that name;
# for each name in FLAG_OPTIONS, `--name` sets it to 1. A dash in an option stands for an
# underscore in its name (--small-size and --small_size both set small_size). -h/--help prints
# `usage` and exits 0; any other argument prints the usage on stderr and dies.
parse_options() {
  local value_options=" $1 " flag_options=" $2 " name
  shift 2
  while [[ $# -gt 0 ]]; do
    case "$1" in
      -h|--help) usage; exit 0 ;;
      --*=*)
        name="${1%%=*}"; name="${name#--}"; name="${name//-/_}"
        [[ "$value_options" == *" $name "* ]] || { usage >&2; die "unknown option: $1"; }
        printf -v "$name" '%s' "${1#*=}"; shift ;;
      --*)
        name="${1#--}"; name="${name//-/_}"
        if [[ "$value_options" == *" $name "* ]]; then
          printf -v "$name" '%s' "${2:?$1 needs a value}"; shift 2
        elif [[ "$flag_options" == *" $name "* ]]; then
          printf -v "$name" '%s' 1; shift
        else
          usage >&2; die "unknown option: $1"
        fi ;;
      *) usage >&2; die "unknown option: $1" ;;
    esac
  done
}

# check_pairs: $pairs is a whole number >= 3.
check_pairs() {
  [[ "$pairs" =~ ^[0-9]+$ ]] || die "--pairs must be a whole number, got '$pairs'"
  (( pairs >= 3 )) || die "--pairs must be at least 3 (medians of fewer runs mean little), got $pairs"
}

# check_jobs ALLOWED: $jobs is a non-empty comma-separated subset of ALLOWED (comma-separated);
# sets job_list to its entries.
check_jobs() {
  local j
  IFS=',' read -r -a job_list <<<"$jobs"
  [[ ${#job_list[@]} -gt 0 ]] || die "--jobs is empty"
  for j in "${job_list[@]}"; do
    [[ ",$1," == *",$j,"* ]] || die "unknown job '$j' in --jobs (choose from $1)"
  done
}

# check_tools BUILD_HINT: $python is there, and $feedline is an executable (made absolute);
# BUILD_HINT says how to build it when it is not.
check_tools() {
  [[ -x "$python" ]] || die "$python not found (the driver needs Debian's python3; stdlib only)"
  [[ -x "$feedline" ]] || die "feedline not found at '$feedline' (build it: $1, or pass --feedline PATH)"
  feedline="$(cd "$(dirname "$feedline")" && pwd)/$(basename "$feedline")"
}

# need_tool NAME: NAME on the PATH, installed with apt-get when missing and running as root.
need_tool() {
  if ! command -v "$1" >/dev/null 2>&1; then
    if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
      echo "$bench_name: $1 not found; installing it with apt-get" >&2
      export DEBIAN_FRONTEND=noninteractive
      apt-get -qq update >/dev/null || true
      apt-get -qq install -y "$1" >/dev/null || die "apt-get install $1 failed"
    fi
    command -v "$1" >/dev/null 2>&1 || die "$1 not found (install it: apt-get install -y $1)"
  fi
}

# gen_once DS gen-flags...: feedline gen DS (--seed 1) unless an earlier run finished it (DS/.complete),
# so that scripts reuse their datasets between runs. Reads $feedline and $dir (created).
gen_once() {
  local ds=$1; shift
  if [[ ! -f $ds/.complete ]]; then
    rm -rf "$ds"
    mkdir -p "$dir"
    "$feedline" gen "$ds" "$@" --seed 1 >/dev/null
    touch "$ds/.complete"
  fi
}

# warm_resident FILE...: reads the files into the page cache and prints the percentage of their
# bytes resident afterwards (fincore). DAMON on shared VMs pages idle data out within tens of
# seconds: a "warm" run that did not re-read its data right before would measure the disk.
warm_resident() {
  cat "$@" >/dev/null
  fincore -b -n -o RES "$@" | awk -v want="$(du -cb "$@" | tail -1 | cut -f1)" \
    '{ r += $1 } END { printf "%.0f", 100 * r / want }'
}
