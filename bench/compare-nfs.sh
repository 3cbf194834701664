#!/usr/bin/env bash
# Compare libnfs's own `nfs-cat URL > /dev/null` against `feedline bench storage nfs://...` reading
# one file sequentially, with 1 and with 4 connections, on an nfs-ganesha this script starts on
# 127.0.0.1 (tests/servers/ganesha.sh) and stops at the end.
#
#   peer   nfs-cat (libnfs-utils): one connection, synchronous 1 MiB-ish reads
#   c1     feedline --connections 1 --bs 1m --iodepth 16        target: c1 / peer >= 1.0
#   c4     feedline --connections 4 --bs 1m --iodepth 16        target: c4 / c1   >= 1.3 where the
#                                                               server has headroom
# Runs alternate peer, c1, c4, peer, c1, c4, ... (--pairs N rounds, default 3) and the table shows
# medians. Client and server share this machine's cores: on 2 cores the server is the limit long
# before 4 connections can help, so read the c4/c1 ratio with the core count printed next to it.
# Exit status 0 when every run worked (a missed target is a finding, not a failure).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name=compare-nfs
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"

size="1g"
pairs="3"
port="20493"
dir="$repo/bench/out/nfs"

usage() {
  cat <<EOF
Usage: $0 [options]
  --size SIZE        size of the test file: 256m, 1g (default: $size)
  --pairs N          rounds of peer/c1/c4, at least 3 (default: $pairs)
  --port PORT        TCP port for the NFS server (default: $port)
  --dir PATH         server state and export directory (default: bench/out/nfs)
  --feedline PATH    feedline binary (default: build/release/tools/feedline if present, else build/dev)
EOF
}
parse_options "size pairs port dir feedline" "" "$@"
check_pairs
check_tools "cmake --build build/release"
need_tool nfs-cat
command -v ganesha.nfsd >/dev/null || die "ganesha.nfsd not found (scripts/install-deps.sh --test)"
case "${size,,}" in
  *g) bytes=$(( ${size%[gG]} << 30 )) ;;
  *m) bytes=$(( ${size%[mM]} << 20 )) ;;
  *) die "--size must look like 256m or 1g" ;;
esac

server="$repo/tests/servers/ganesha.sh"
mkdir -p "$dir/export"
file="$dir/export/seq.bin"
have=0
[[ -f $file ]] && have=$(stat -c %s "$file")
if ((have != bytes)); then
  echo "compare-nfs: writing $size of random data to $file" >&2
  head -c "$bytes" /dev/urandom >"$file"
fi
bash "$server" start "$dir/server" "$dir/export" "$port"
trap 'bash "$server" stop "$dir/server"' EXIT
url="nfs://127.0.0.1/export/seq.bin?version=4&nfsport=$port"

# Warm the server's page cache, so every run reads from memory.
cat "$file" >/dev/null

results="$dir/results.txt"
: >"$results"
now() { date +%s.%N; }
server_pid=$(cat "$dir/server/pid")
tick=$(getconf CLK_TCK)
# CPU seconds the server (ganesha) and the client (this script's reaped children) used: user +
# system from /proc.
server_cpu() { awk -v t="$tick" '{print ($14 + $15) / t}' "/proc/$server_pid/stat"; }
client_cpu() { awk -v t="$tick" '{print ($16 + $17) / t}' "/proc/$$/stat"; }  # reaped children
# CPU seconds the whole machine was not idle (softirq of the loopback TCP included).
machine_cpu() { awk -v t="$tick" '/^cpu /{print ($2 + $3 + $4 + $7 + $8 + $9) / t}' /proc/stat; }
# One run: NAME, then the command. Appends "NAME bytes/s server-cores client-cores machine-cores".
measure() {
  local name=$1 s0 s1 c0 c1 m0 m1 t0 t1
  shift
  s0=$(server_cpu); c0=$(client_cpu); m0=$(machine_cpu); t0=$(now)
  "$@"
  t1=$(now); s1=$(server_cpu); c1=$(client_cpu); m1=$(machine_cpu)
  echo "$name $("$python" -c "w = $t1 - $t0; print($bytes / w, ($s1 - $s0) / w, ($c1 - $c0) / w, ($m1 - $m0) / w)")" >>"$results"
}
for ((i = 1; i <= pairs; i++)); do
  measure peer bash -c 'nfs-cat "$1" >/dev/null' _ "$url"
  for c in 1 4; do
    measure "c$c" bash -c '"$1" bench storage "$2" --rw read --bs 1m --iodepth 16 --connections "$3" \
      --output json >/dev/null' _ "$feedline" "$url" "$c"
  done
done

"$python" - "$results" "$bytes" "$(nproc)" <<'EOF'
import statistics, sys
runs, cores = {}, {}
for line in open(sys.argv[1]):
    k, v, server, client, machine = line.split()
    runs.setdefault(k, []).append(float(v))
    cores.setdefault(k, []).append((float(server), float(client), float(machine)))
med = {k: statistics.median(v) for k, v in runs.items()}
# Cores busy during each tool's runs (wall-clock includes start-up, so bandwidth here is the
# whole command's, a little under bench storage's own figure).
busy = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in cores.items()}
gb = lambda x: "%.2f GB/s" % (x / 1e9)
print("compare-nfs: sequential read of a %d MiB file over NFSv4 (nfs-ganesha on 127.0.0.1, %s cores shared by client and server)"
      % (int(sys.argv[2]) >> 20, sys.argv[3]))
print("  runs (GB/s): " + "; ".join("%s %s" % (k, " ".join("%.2f" % (x / 1e9) for x in v)) for k, v in runs.items()))
print("  %-38s %12s" % ("", "median"))
print("  %-38s %12s" % ("peer: nfs-cat URL > /dev/null", gb(med["peer"])))
print("  %-38s %12s   ratio c1/peer %.2f (target >= 1.0)" % ("feedline --connections 1", gb(med["c1"]), med["c1"] / med["peer"]))
print("  %-38s %12s   ratio c4/c1   %.2f (target >= 1.3 where the server has headroom)" % ("feedline --connections 4", gb(med["c4"]), med["c4"] / med["c1"]))
print("  cores busy (median): " + "; ".join("%s server %.2f, client %.2f, whole machine %.2f of %s" % (k, s, c, m, sys.argv[3])
                                          for k, (s, c, m) in busy.items()))
EOF
