#!/usr/bin/env bash
# http:// brace lists on a web server without a listing (nginx with autoindex off: the common case,
# a CDN): `feedline run 'http://host/dir/{...}' --format files` sends no HEAD per object. Each
# object is one GET of up to the size guess (1 MiB, or --max-sample-size), its size learned from
# the answer, and a second GET only for the rest of a larger one; nginx's access log shows it. The
# delivered digest equals the Python digest of the bytes curl gets for the same URLs. Tar shards
# keep their HEADs (the index check and the header scan need their sizes). A missing object is a
# clear 404 naming it; an object over --max-sample-size a clear error naming it.
# Usage: http_nolist.sh FEEDLINE_BINARY SCRATCH_DIR [uring|nouring]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
source "$here/net_lib.sh"
source "$here/../servers/servers.sh"
net_test_start "$@"
write_digest_py "$scratch/digest.py"
require_xxhash
run_timeout=120

www=$scratch/www
mkdir -p "$www/nolist/files"
# 40 objects: empty, small, a page, exactly the 1 MiB guess, one byte more, 3 MiB, and 64 KiB ones.
sizes=(0 1 4096 1048576 1048577 3145728 70000 123)
for ((i = 0; i < 40; i++)); do
  n=${sizes[i]:-65536}
  head -c "$n" /dev/urandom >"$www/nolist/files/$(printf %06d "$i").bin"
done
must_gen "$www/nolist/tar" --format tar --samples 60 --samples-per-shard 20 --sample-size normal:20KiB:6KiB --seed 41
log=$scratch/nolist-access.log
# No listing under /nolist/ (a directory URL is a 403 there), and an access log of its own.
nginx_server_extra="location /nolist/ { autoindex off; access_log $log; }"
ngport=$(free_port)
start_nginx "$www" "$ngport" || { echo "FAIL: nginx did not start"; exit 1; }
base=http://127.0.0.1:$ngport
[[ $(curl -s -o /dev/null -w '%{http_code}' "$base/nolist/files/") == 403 ]] ||
  { echo "FAIL: nginx lists /nolist/files/ (autoindex should be off there)"; exit 1; }

# What a real client gets: each object fetched by curl, then the Python digest of those bytes.
mkdir -p "$scratch/curl-copy"
for ((i = 0; i < 40; i++)); do
  f=$(printf %06d "$i").bin
  curl -fsS -o "$scratch/curl-copy/$f" "$base/nolist/files/$f" || { echo "FAIL: curl could not fetch $f"; exit 1; }
done
py_digest "$scratch/curl-copy"
curl_digest=$want_digest
: >"$log"  # from here on, feedline's requests only

# --- a files brace list: no HEAD, one GET per object (two for an object over the guess) --------------
checks=$((checks + 1))
if must_frun "run a brace list without a listing" run "$base/nolist/files/{000000..000039}.bin" --format files \
  --batch-size 8 --io-depth 16 --json "$scratch/nolist.json"; then
  got=$(json_get "$scratch/nolist.json" '"%s %s" % (d["delivered"]["digest"], d["delivered"]["samples"])')
  if [[ $got == "$curl_digest 40" ]]; then
    echo "ok: run over a server without a listing: 40 samples, the digest of what curl gets ($curl_digest)"
  else
    fail "run over a server without a listing: digest and samples '$got', curl's bytes give '$curl_digest 40'"
  fi
fi
# Objects of one sample each cost a request each: auto runs a storage thread per core (at most
# 4), each with its own queue; with --connections fixed, one (every queue would open that many).
checks=$((checks + 1))
want_threads=$(( $(nproc) < 4 ? $(nproc) : 4 ))
threads=$(json_get "$scratch/nolist.json" 'd["io"]["storage_threads"]')
if [[ $threads == "$want_threads" ]]; then
  echo "ok: auto storage threads for HTTP objects: $threads (one per core, at most 4)"
else
  fail "auto storage threads for HTTP objects: $threads, expected $want_threads"
fi
# Their sizes are unknown until read: the header says so rather than "40 samples, 0 B".
checks=$((checks + 1))
unknown=$(json_get "$scratch/nolist.json" 'd["dataset"]["unknown_size_samples"]')
if grep -q "(files, 40 samples, sizes learned as they are read)" "$out" && [[ $unknown == 40 ]]; then
  echo "ok: the run's header and JSON say the 40 sizes are learned as the objects are read"
else
  fail "header/JSON for unknown sizes: dataset.unknown_size_samples '$unknown', header: $(head -1 "$out")"
fi
checks=$((checks + 1))
bad=()
heads=$(grep -c '"HEAD ' "$log")
((heads == 0)) || bad+=("$heads HEAD requests, expected none")
for ((i = 0; i < 40; i++)); do
  f=$(printf %06d "$i").bin
  n=${sizes[i]:-65536}
  want=1
  ((n > 1048576)) && want=2
  gets=$(grep -c "\"GET /nolist/files/$f " "$log")
  ((gets == want)) || bad+=("$f ($n bytes): $gets GETs, expected $want")
done
others=$(grep -vc '"GET /nolist/files/0000[0-9][0-9].bin \|"GET /nolist/files/ ' "$log")
((others == 0)) || bad+=("$others other requests")
conclude "access log of a brace list without a listing" \
  "no HEAD; one GET per object, two for the 2 objects over the 1 MiB guess ($(wc -l <"$log") requests)" log "$log"

# (after the access-log check: this run adds its own requests)
checks=$((checks + 1))
if must_frun "run with --connections" run "$base/nolist/files/{000000..000039}.bin" --format files \
  --batch-size 8 --io-depth 16 --connections 8 --json "$scratch/nolist-conn.json"; then
  got=$(json_get "$scratch/nolist-conn.json" '"%s %s %s" % (d["io"]["storage_threads"], d["delivered"]["digest"], d["delivered"]["samples"])')
  if [[ $got == "1 $curl_digest 40" ]]; then
    echo "ok: --connections 8: one storage thread, the same 40 samples"
  else
    fail "--connections 8: threads, digest, samples '$got', expected '1 $curl_digest 40'"
  fi
fi
# --max-sample-size is the guess: 64 KiB objects then fit one GET, and a larger object is refused
# by name before its rest is read.
: >"$log"
expect_net_error "an object over --max-sample-size" 60 "re:$base/nolist/files/00000[3-6]\.bin" "more than the largest sample" "--max-sample-size" \
  -- run "$base/nolist/files/{000000..000039}.bin" --format files --max-sample-size 64KiB --json "$scratch/nolist-max.json"
checks=$((checks + 1))
if must_frun "--max-sample-size with --on-error skip" run "$base/nolist/files/{000006..000039}.bin" --format files \
  --max-sample-size 100KiB --on-error skip --json "$scratch/nolist-skip.json"; then
  problems=$(json_check "$scratch/nolist-skip.json" "d['delivered']['samples'] == 34" \
    "run with --max-sample-size 100KiB over objects of at most 70,000 bytes: expected all 34 samples")
  [[ -z $problems ]] && echo "ok: --max-sample-size 100KiB: all 34 samples" || fail "$problems"
fi

# --- a missing object: a 404 at its read, naming it --------------------------------------------------
expect_net_error "a missing object in a brace list without a listing" 60 "$base/nolist/files/000040.bin" "404" \
  -- run "$base/nolist/files/{000000..000040}.bin" --format files --json "$scratch/nolist-missing.json"

# --- tar shards keep their HEADs (sizes needed for the index and the header scan) ---------------------
checks=$((checks + 1))
must_frun "run local tar" run "$www/nolist/tar" --batch-size 16 --json "$scratch/local-tar.json" &&
  { : >"$log"
    must_frun "run tar shards without a listing" run "$base/nolist/tar/shard-{000000..000002}.tar" --format tar \
      --batch-size 16 --json "$scratch/nolist-tar.json" &&
      same_digest "run $base/nolist/tar/shard-{000000..000002}.tar" "$scratch/local-tar.json" "$scratch/nolist-tar.json"
    heads=$(grep -c '"HEAD /nolist/tar/shard-00000[0-2].tar ' "$log")
    ((heads == 3)) && echo "ok: tar shards without a listing: one HEAD each" ||
      fail "tar shards without a listing: $heads HEADs of the shards, expected 3"; }

check_no_secrets
finish http_nolist
