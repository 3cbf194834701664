#!/usr/bin/env bash
# Formats every C++ source of the repository with its .clang-format (clang-format 14, Debian 12).
#   scripts/format.sh           rewrite the files in place
#   scripts/format.sh --check   change nothing; list the files that differ and exit 1 if any do
# Only files git knows of (tracked, or new and not ignored): build trees and node_modules stay out.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format.sh: clang-format is missing (apt-get install clang-format)" >&2; exit 1; }
mapfile -t files < <( (git ls-files -- '*.cpp' '*.hpp' '*.h'; git ls-files --others --exclude-standard -- '*.cpp' '*.hpp' '*.h') | sort -u)
if [[ ${1:-} == --check ]]; then
  bad=()
  for f in "${files[@]}"; do
    [[ -f $f ]] || continue
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if ((${#bad[@]} > 0)); then
    echo "format.sh: ${#bad[@]} file(s) not formatted (run scripts/format.sh):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted" >&2
  exit 0
fi
[[ $# -eq 0 ]] || { echo "usage: scripts/format.sh [--check]" >&2; exit 2; }
for f in "${files[@]}"; do [[ -f $f ]] && clang-format -i "$f"; done
