#!/usr/bin/env bash
# Compare feedline's HTTP/S3 reads with curl, aws-cli and rclone, side by side on the same nginx
# server at the same concurrency C (default 16). Starts its servers itself and stops them on exit.
#
# Jobs (choose with --jobs):
#   large  one large object (--size, default 1 GiB) from nginx:
#            curl     C parallel ranged GETs of 8 MiB parts (curl --parallel --parallel-max C, -K list),
#                     bodies to /dev/null (the bytes are dropped: no copy kept anywhere)
#            curl-tmpfs  the same GETs, each part written to a file in tmpfs (/dev/shm): curl's way of
#                     keeping the bytes in memory; for CPU per GiB at equal work (feedline keeps every
#                     byte in its buffers: one copy out of libcurl's receive buffer)
#            aws      /usr/bin/aws s3 cp s3://bench/big.bin - (max_concurrent_requests C, 8 MiB chunks)
#            rclone   rclone cat :http:big.bin (one stream: rclone cat has no parallel mode; shown, not a peer at C)
#            feedline feedline bench storage http://.../big.bin --rw read --bs 8m --iodepth C
#          targets: feedline GB/s >= the best of curl, aws and rclone; CPU s/GiB <= curl's (shown
#          against curl dropping the bytes and against curl keeping them)
#   small  --count objects (default 10,000) of --small-size (default 64 KiB) from nginx:
#            curl        curl --parallel --parallel-max C over a -K list of URLs (output /dev/null)
#            curl-sigv4  the same, every request signed by curl (--aws-sigv4, the signer feedline uses)
#            aws         /usr/bin/aws s3 cp --recursive s3://bench/small/ DIR (max_concurrent_requests C)
#            feedline    feedline run 'http://.../small/{00000..09999}.bin' --format files --io-depth C
#                        (sizes from nginx's JSON directory listing, one GET; a server without
#                        one costs a HEAD per object)
#            feedline-s3 feedline run s3://bench/small/ --endpoint http://nginx (same objects, listed,
#                        signed)
#            feedline-s3-unsigned  the same with --no-sign-request
#   nolist the same --count objects from a location of the same nginx with no listing (autoindex
#          off: a CDN's case; all of them: 4,000 made a 0.25 s run that start-up and noise swayed):
#            curl        curl --parallel --parallel-max C over a -K list of their URLs
#            feedline    feedline run 'http://.../nolist/{00000..09999}.bin' --format files --io-depth C:
#                        no HEAD; each object one GET of up to 1 MiB, its size learned from the answer
#            feedline-base  the same with --baseline_feedline PATH (a binary to compare with), if given
#          targets: objects/s >= 1.0 x curl, CPU s/GiB <= curl's
#          targets: objects/s >= 2 x aws and >= 1.0 x curl; each feedline row is set against the
#          curl row that does the same work: unsigned rows against curl, the signed one against
#          curl-sigv4 (signing costs ~50 us of CPU per request in curl 7.88 + OpenSSL 3, in both)
# aws-cli and feedline's s3:// talk to the same nginx: it serves the objects under /bench/ and a
# static ListObjectsV2 answer (pages of 1,000 keys, written by this script) for the bucket, so every
# tool reads from one server (s3rver, at 550-1,000 requests/s, would be the bottleneck of all).
# Every tool's CPU is measured the same way: user+sys of the process (GNU time), reported as CPU
# seconds per GiB received (target: feedline <= curl).
#
# Runs alternate tools (A B C A B C ...) for --pairs rounds; the table shows medians; raw numbers and
# the table go to bench/out/compare-http.json (or --out PATH).
# Exit status: 0 when every run worked (even if a target is missed: a measurement, not a test); 1 when
# feedline cannot read http:// (built without the HTTP backend: the peers still run and print);
# 2 for bad usage or a missing tool.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bench_name=compare-http
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"
# shellcheck source=../tests/servers/servers.sh
source "$repo/tests/servers/servers.sh"

concurrency=16
size=1g
count=10000
small_size=64k
pairs=3
jobs="large,small"
out="$repo/bench/out/compare-http.json"
workdir="$repo/bench/out/http"

usage() {
  cat <<USAGE
Usage: $0 [options]
  --concurrency C    requests in flight for every tool (default: $concurrency)
  --size SIZE        the large object (default: $size)
  --count N          small objects (default: $count)
  --small_size SIZE  bytes per small object (default: $small_size)
  --pairs N          rounds of every tool, at least 1 (default: $pairs)
  --jobs LIST        comma-separated subset of large,small,nolist (default: $jobs)
  --baseline_feedline PATH  also run this feedline binary in the nolist job (row feedline-base)
  --feedline PATH    feedline binary (default: build/release/tools/feedline if present, else build/dev)
  --workdir DIR      where the served files live (default: bench/out/http; reused when present)
  --out PATH         JSON report (default: bench/out/compare-http.json)
  --hold             start the server, write the curl lists, print the commands each tool would run,
                     and wait (until Ctrl-C) instead of measuring: for profiling one tool by hand
USAGE
}
baseline_feedline=""
parse_options "concurrency size count small_size pairs jobs feedline workdir out baseline_feedline" "hold" "$@"
[[ $concurrency =~ ^[0-9]+$ && $concurrency -ge 1 ]] || die "--concurrency must be a whole number >= 1"
[[ $pairs =~ ^[0-9]+$ && $pairs -ge 1 ]] || die "--pairs must be a whole number >= 1"
[[ $count =~ ^[0-9]+$ && $count -ge 1 && $count -le 100000 ]] || die "--count must be 1..100000"
check_jobs large,small,nolist
to_bytes() { "$python" -c '
import re, sys
m = re.fullmatch(r"(\d+)\s*([kmgt]?)(i?b)?", sys.argv[1].strip().lower())
if not m: sys.exit(1)
print(int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2)])' "$1"; }
big_bytes=$(to_bytes "$size") || die "--size must look like 512m or 1g"
small_bytes=$(to_bytes "$small_size") || die "--small_size must look like 64k"
((big_bytes >= 8 << 20)) || die "--size must be at least 8 MiB"

check_tools "cmake --build build/release"
need_tool nginx
need_tool curl
[[ -x /usr/bin/aws ]] || die "/usr/bin/aws (Debian's awscli) not found: scripts/install-deps.sh --test"
command -v rclone >/dev/null || echo "$bench_name: rclone not found: its rows are skipped" >&2
[[ -x /usr/bin/time ]] || die "/usr/bin/time (GNU time) not found: apt-get install -y time"

# --- data ------------------------------------------------------------------------------------------------
www=$workdir/www
mkdir -p "$www/bench/small" "$www/bench/_list"
big=$www/bench/big.bin
if [[ ! -f $big || $(stat -c %s "$big") -ne $big_bytes ]]; then
  echo "$bench_name: writing $size of random data to $big" >&2
  head -c "$big_bytes" /dev/urandom >"$big"
fi
mkdir -p "$www/rclone"
ln -f "$big" "$www/rclone/big.bin"
digits=${#count}; ((digits < 5)) && digits=5
last=$(printf "%0${digits}d" $((count - 1)))
"$python" - "$www/bench" "$count" "$small_bytes" "$digits" <<'PY'
# The small objects and a static ListObjectsV2 answer for prefix small/ (pages of 1,000).
import hashlib, os, sys
root, count, size, digits = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
stamp = os.path.join(root, "_list", "stamp")
want = "%d %d %d" % (count, size, digits)
if os.path.exists(stamp) and open(stamp).read() == want:
    sys.exit(0)
keys = []
for i in range(count):
    name = "%0*d.bin" % (digits, i)
    path = os.path.join(root, "small", name)
    data = os.urandom(size)
    with open(path, "wb") as f:
        f.write(data)
    keys.append(("small/" + name, hashlib.md5(data).hexdigest()))
pages = [keys[i:i + 1000] for i in range(0, len(keys), 1000)]
for n, page in enumerate(pages):
    more = n + 1 < len(pages)
    xml = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
           "<Name>bench</Name><Prefix>small/</Prefix><KeyCount>%d</KeyCount><MaxKeys>1000</MaxKeys>" % len(page),
           "<IsTruncated>%s</IsTruncated>" % ("true" if more else "false")]
    if more:
        xml.append("<NextContinuationToken>page%d</NextContinuationToken>" % (n + 1))
    for key, md5 in page:
        xml.append('<Contents><Key>%s</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified><ETag>"%s"</ETag>'
                   "<Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>" % (key, md5, size))
    xml.append("</ListBucketResult>")
    with open(os.path.join(root, "_list", "page%d.xml" % n), "w") as f:
        f.write("".join(xml))
open(stamp, "w").write(want)
PY

# --- servers: nginx with the static bucket listing ----------------------------------------------------
servers_cleanup_on_exit
port=$(free_port)
servers_tmp
prefix=$servers_dir/nginx-bench
mkdir -p "$prefix/tmp"
user=""; (($(id -u) == 0)) && user="user root root;"
cat >"$prefix/nginx.conf" <<CONF
$user
worker_processes 2; daemon off; pid $prefix/nginx.pid; error_log $prefix/error.log warn;
events { worker_connections 4096; }
http {
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000; keepalive_timeout 120s;
  client_body_temp_path $prefix/tmp/body; proxy_temp_path $prefix/tmp/proxy; fastcgi_temp_path $prefix/tmp/fcgi;
  uwsgi_temp_path $prefix/tmp/uwsgi; scgi_temp_path $prefix/tmp/scgi; default_type application/octet-stream;
  server {
    listen 127.0.0.1:$port; root $www;
    # ListObjectsV2 on the bucket: the static page for the continuation token (page0 first).
    # (aws-cli asks /bench?list-type=2..., others /bench/?list-type=2...)
    location ~ ^/bench/?\$ {
      default_type application/xml;
      set \$page page0;
      if (\$args ~ "continuation-token=([A-Za-z0-9]+)") { set \$page \$1; }
      rewrite ^ /bench/_list/\$page.xml break;
    }
    # rclone's http remote finds big.bin in an HTML index.
    location = /rclone/ { autoindex on; }
    # feedline's http:// brace list takes its sizes from this JSON listing (no HEAD per object).
    location = /bench/small/ { autoindex on; autoindex_format json; }
    # The same objects without a listing (the nolist job).
    location /bench/nolist/ { alias $www/bench/small/; }
  }
}
CONF
nginx -c "$prefix/nginx.conf" -p "$prefix" >"$servers_dir/nginx.log" 2>&1 </dev/null &
servers_started nginx "$port" $! quit "$servers_dir/nginx.log" || die "nginx did not start"
base=http://127.0.0.1:$port
curl -sf "$base/bench?list-type=2&prefix=small%2F" | grep -q "<Key>small/" || die "the static listing does not work (nginx config)"

# aws-cli: a config in a temp dir (C concurrent requests, 8 MiB parts), dummy keys (nginx ignores them).
awsdir=$servers_dir/aws
mkdir -p "$awsdir"
cat >"$awsdir/config" <<AWSCFG
[default]
region = us-east-1
s3 =
  max_concurrent_requests = $concurrency
  multipart_chunksize = 8MB
  multipart_threshold = 8MB
AWSCFG
aws_env=(env -u AWS_PROFILE -u AWS_ENDPOINT_URL -u AWS_SESSION_TOKEN AWS_CONFIG_FILE="$awsdir/config"
         AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_ACCESS_KEY_ID=BENCH AWS_SECRET_ACCESS_KEY=BENCH
         AWS_EC2_METADATA_DISABLED=true AWS_PAGER=)

# curl -K lists.
part=$((8 << 20))
{
  for ((off = 0; off < big_bytes; off += part)); do
    end=$((off + part - 1)); ((end >= big_bytes)) && end=$((big_bytes - 1))
    printf 'url = "%s/bench/big.bin"\nrange = %d-%d\noutput = "/dev/null"\n' "$base" "$off" "$end"
  done
} >"$servers_dir/curl-large.cfg"
# curl keeping the bytes: one tmpfs file per part (only when /dev/shm has room for the object twice).
keep_dir=""
if [[ -d /dev/shm && -w /dev/shm ]] && (($(df -B1 --output=avail /dev/shm | tail -n 1) > 2 * big_bytes)); then
  keep_dir=$(mktemp -d /dev/shm/feedline-compare-http.XXXXXX)
  cleanup() { rm -rf -- "$keep_dir"; stop_servers; }
  trap cleanup EXIT
  trap 'cleanup; trap - EXIT; exit 130' INT
  trap 'cleanup; trap - EXIT; exit 143' TERM
  awk -v dir="$keep_dir" '/^output = / { printf "output = \"%s/part.%d\"\n", dir, n++; next } { print }' \
    "$servers_dir/curl-large.cfg" >"$servers_dir/curl-large-tmpfs.cfg"
else
  echo "$bench_name: /dev/shm is missing or too small for --size twice: the curl-tmpfs row is skipped" >&2
fi
{
  for ((i = 0; i < count; i++)); do
    printf 'url = "%s/bench/small/%0*d.bin"\noutput = "/dev/null"\n' "$base" "$digits" "$i"
  done
} >"$servers_dir/curl-small.cfg"
nolist_count=$count
nolist_last=$(printf "%0${digits}d" $((nolist_count - 1)))
{
  for ((i = 0; i < nolist_count; i++)); do
    printf 'url = "%s/bench/nolist/%0*d.bin"\noutput = "/dev/null"\n' "$base" "$digits" "$i"
  done
} >"$servers_dir/curl-nolist.cfg"
{
  printf 'aws-sigv4 = "aws:amz:us-east-1:s3"\nuser = "BENCH:BENCH"\n'
  cat "$servers_dir/curl-small.cfg"
} >"$servers_dir/curl-small-sigv4.cfg"

if [[ ${hold:-} == 1 ]]; then
  cat <<HOLD
$bench_name: nginx serves $www on $base (Ctrl-C stops it)
  curl -sS --parallel --parallel-max $concurrency -K $servers_dir/curl-small.cfg
  curl -sS --parallel --parallel-max $concurrency -K $servers_dir/curl-small-sigv4.cfg
  $feedline run '$base/bench/small/{$(printf "%0${digits}d" 0)..$last}.bin' --format files --batch-size 64 --io-depth $concurrency --decode-threads 2
  ${aws_env[*]} $feedline run s3://bench/small/ --endpoint $base --format files --batch-size 64 --io-depth $concurrency --decode-threads 2
  curl -sS --parallel --parallel-max $concurrency -K $servers_dir/curl-large.cfg
  $feedline bench storage $base/bench/big.bin --rw read --bs 8m --iodepth $concurrency --size $big_bytes
HOLD
  while :; do sleep 3600 & wait $!; done  # wait: a signal ends it at once (the trap stops nginx)
fi

# --- feedline's HTTP backend? ----------------------------------------------------------------------------
feedline_ok=1
if ! "$feedline" bench storage "$base/bench/big.bin" --size 8m --bs 8m --output json >"$servers_dir/probe.json" 2>"$servers_dir/probe.err"; then
  feedline_ok=0
  echo "$bench_name: feedline cannot read http:// here: $(head -n 1 "$servers_dir/probe.err")" >&2
  echo "$bench_name: its rows are skipped; the peers still run" >&2
fi

# --- runs --------------------------------------------------------------------------------------------------
results=$servers_dir/results.tsv
: >"$results"
# delayed_acks: the kernel's count of ACKs sent by the delayed-ACK timer (TcpExt DelayedACKs, all
# sockets on this machine). Each one a client waited for is a ~40 ms stall when the server holds
# the tail of an answer until the rest is ACKed (Nagle); shown per run as evidence.
delayed_acks() {
  awk '/^TcpExt:/ { if (!h) { for (i = 1; i <= NF; i++) n[i] = $i; h = 1 }
                    else { for (i = 1; i <= NF; i++) if (n[i] == "DelayedACKs") print $i } }' /proc/net/netstat 2>/dev/null || echo 0
}
# measure JOB TOOL UNITS BYTES CMD...: runs CMD under GNU time; appends
# "job tool units bytes wall user sys [json] delayed-acks".
measure() {
  local job=$1 tool=$2 units=$3 bytes=$4; shift 4
  local tf=$servers_dir/time.txt
  sync
  local acks_before
  acks_before=$(delayed_acks)
  if ! /usr/bin/time -o "$tf" -f '%e %U %S' "$@" >"$servers_dir/run.out" 2>"$servers_dir/run.err"; then
    echo "$bench_name: $job/$tool failed: ${*@Q}" >&2
    tail -n 5 "$servers_dir/run.err" >&2
    return 1
  fi
  local extra=""
  [[ -s $servers_dir/run.json ]] && extra=$(tr -d '\n' <"$servers_dir/run.json")
  local acks_after acks
  acks_after=$(delayed_acks)
  acks=$((acks_after - acks_before))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$job" "$tool" "$units" "$bytes" "$(tail -n 1 "$tf")" "$extra" "$acks" >>"$results"
  rm -f "$servers_dir/run.json"
  echo "$bench_name: $job/$tool: $(tail -n 1 "$tf") (wall user sys), $acks delayed ACKs" >&2
}
failed=0
for ((round = 1; round <= pairs; round++)); do
  if [[ ,$jobs, == *,large,* ]]; then
    measure large curl 1 "$big_bytes" curl -sS --fail --parallel --parallel-max "$concurrency" -K "$servers_dir/curl-large.cfg" || failed=1
    if [[ -n $keep_dir ]]; then
      rm -f "$keep_dir"/part.*
      measure large curl-tmpfs 1 "$big_bytes" curl -sS --fail --parallel --parallel-max "$concurrency" -K "$servers_dir/curl-large-tmpfs.cfg" || failed=1
      rm -f "$keep_dir"/part.*
    fi
    measure large aws 1 "$big_bytes" bash -c '"$@" /usr/bin/aws --endpoint-url '"$base"' s3 cp s3://bench/big.bin - >/dev/null' _ "${aws_env[@]}" || failed=1
    if command -v rclone >/dev/null; then
      measure large rclone 1 "$big_bytes" bash -c 'env -u AWS_CA_BUNDLE rclone cat --http-url '"$base"'/rclone/ :http:big.bin >/dev/null' || failed=1
    fi
    if ((feedline_ok)); then
      measure large feedline 1 "$big_bytes" bash -c '"$1" bench storage "$2" --rw read --bs 8m --iodepth "$3" --size "$4" --output json >"$5"' _ \
        "$feedline" "$base/bench/big.bin" "$concurrency" "$big_bytes" "$servers_dir/run.json" || failed=1
    fi
  fi
  if [[ ,$jobs, == *,small,* ]]; then
    measure small curl "$count" $((count * small_bytes)) curl -sS --fail --parallel --parallel-max "$concurrency" -K "$servers_dir/curl-small.cfg" || failed=1
    measure small curl-sigv4 "$count" $((count * small_bytes)) curl -sS --fail --parallel --parallel-max "$concurrency" -K "$servers_dir/curl-small-sigv4.cfg" || failed=1
    rm -rf "$workdir/aws-dl"
    measure small aws "$count" $((count * small_bytes)) "${aws_env[@]}" /usr/bin/aws --endpoint-url "$base" s3 cp --recursive --only-show-errors s3://bench/small/ "$workdir/aws-dl" || failed=1
    got=$(find "$workdir/aws-dl" -type f 2>/dev/null | wc -l)
    ((got == count)) || { echo "$bench_name: aws-cli downloaded $got of $count objects" >&2; failed=1; }
    rm -rf "$workdir/aws-dl"
    if ((feedline_ok)); then
      measure small feedline "$count" $((count * small_bytes)) "$feedline" run "$base/bench/small/{$(printf "%0${digits}d" 0)..$last}.bin" \
        --format files --batch-size 64 --io-depth "$concurrency" --decode-threads 2 --json "$servers_dir/run.json" || failed=1
      measure small feedline-s3 "$count" $((count * small_bytes)) "${aws_env[@]}" "$feedline" run s3://bench/small/ --endpoint "$base" \
        --format files --batch-size 64 --io-depth "$concurrency" --decode-threads 2 --json "$servers_dir/run.json" || failed=1
      measure small feedline-s3-unsigned "$count" $((count * small_bytes)) "${aws_env[@]}" "$feedline" run s3://bench/small/ --endpoint "$base" \
        --no-sign-request --format files --batch-size 64 --io-depth "$concurrency" --decode-threads 2 --json "$servers_dir/run.json" || failed=1
    fi
  fi
  if [[ ,$jobs, == *,nolist,* ]]; then
    measure nolist curl "$nolist_count" $((nolist_count * small_bytes)) curl -sS --fail --parallel --parallel-max "$concurrency" -K "$servers_dir/curl-nolist.cfg" || failed=1
    if ((feedline_ok)); then
      measure nolist feedline "$nolist_count" $((nolist_count * small_bytes)) "$feedline" run "$base/bench/nolist/{$(printf "%0${digits}d" 0)..$nolist_last}.bin" \
        --format files --batch-size 64 --io-depth "$concurrency" --decode-threads 2 --json "$servers_dir/run.json" || failed=1
      if [[ -n $baseline_feedline ]]; then
        measure nolist feedline-base "$nolist_count" $((nolist_count * small_bytes)) "$baseline_feedline" run "$base/bench/nolist/{$(printf "%0${digits}d" 0)..$nolist_last}.bin" \
          --format files --batch-size 64 --io-depth "$concurrency" --decode-threads 2 --json "$servers_dir/run.json" || failed=1
      fi
    fi
  fi
done
cp "$results" "$workdir/results.tsv"

"$python" "$here/compare_http.py" "$workdir/results.tsv" "$out" "$concurrency" "$pairs" "$feedline_ok" "$small_bytes"
((feedline_ok)) || { echo "$bench_name: feedline was not measured (see above)" >&2; exit 1; }
exit "$failed"
