# shellcheck shell=bash
# Start and stop the servers the S3/HTTP tests and benches need, from bash:
#   source tests/servers/servers.sh
#   trap stop_servers EXIT            # (or call servers_cleanup_on_exit: EXIT, INT and TERM)
#   port=$(free_port)
#   start_s3rver "$dir/s3data" "$port"           # S3 protocol (s3rver from npm: tests/servers/setup.sh)
#   start_nginx "$dir/www" "$(free_port)"        # files with Range support
#   start_s3proxy "$port" "$(free_port)" --verify-sigv4 "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" --stats F
# Every server listens on 127.0.0.1 only, runs in the background with its pid recorded, and logs to
# $servers_dir/<name>-<port>.log (servers_dir: a temp dir made on first use, removed by stop_servers
# unless SERVERS_KEEP=1). start_* return non-zero (with the log's tail on stderr) when the server
# does not come up within $servers_start_timeout seconds (default 30).
# Ports: pass your own, or take free_port's (the kernel's choice of a free ephemeral port), so that
# tests running in parallel do not collide.

servers_root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
servers_dir=${servers_dir:-}
servers_pids=()
servers_kinds=()
servers_start_timeout=${servers_start_timeout:-30}
servers_py=/usr/bin/python3

# servers_tmp: makes $servers_dir if needed.
servers_tmp() {
  if [[ -z $servers_dir || ! -d $servers_dir ]]; then
    servers_dir=$(mktemp -d "${TMPDIR:-/tmp}/feedline-servers.XXXXXX")
    chmod 755 "$servers_dir"
  fi
}

# free_port: prints a TCP port on 127.0.0.1 that was free a moment ago.
free_port() {
  "$servers_py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# wait_port PORT [TIMEOUT_S] [PID]: returns 0 once 127.0.0.1:PORT accepts connections; 1 after
# TIMEOUT_S (default $servers_start_timeout) or as soon as PID (if given) has exited.
wait_port() {
  local port=$1 timeout=${2:-$servers_start_timeout} pid=${3:-}
  local deadline=$((SECONDS + timeout))
  while ((SECONDS < deadline)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then return 1; fi
    sleep 0.1
  done
  return 1
}

# servers_started NAME PORT PID KIND LOG: records the pid and waits for the port.
servers_started() {
  local name=$1 port=$2 pid=$3 kind=$4 log=$5
  servers_pids+=("$pid")
  servers_kinds+=("$kind")
  if ! wait_port "$port" "$servers_start_timeout" "$pid"; then
    echo "servers.sh: $name did not start on 127.0.0.1:$port (log $log):" >&2
    tail -n 20 "$log" >&2 2>/dev/null
    return 1
  fi
}

# start_s3rver DATA_DIR PORT: s3rver (any access key and secret; it does not check signatures).
start_s3rver() {
  local data=$1 port=$2
  servers_tmp
  local js=$servers_root/node_modules/s3rver/bin/s3rver.js
  if [[ ! -f $js ]]; then
    echo "servers.sh: s3rver is not installed: run tests/servers/setup.sh (needs node and npm)" >&2
    return 1
  fi
  mkdir -p "$data"
  local log=$servers_dir/s3rver-$port.log
  # s3rver's ListObjectsV2 continuation tokens use DES, which Node 17+ (OpenSSL 3) refuses without
  # the legacy provider: every truncated listing (more than max-keys objects) would be a 500.
  local legacy=()
  node --openssl-legacy-provider -e 0 2>/dev/null && legacy=(--openssl-legacy-provider)
  node "${legacy[@]}" "$js" -d "$data" -a 127.0.0.1 -p "$port" --silent >"$log" 2>&1 </dev/null &
  servers_started s3rver "$port" $! term "$log"
}

# start_nginx ROOT_DIR PORT [CERT KEY]: nginx serving ROOT_DIR (Range requests, keep-alive,
# sendfile, WebDAV PUT, JSON directory listings); with CERT and KEY (PEM files) over TLS.
# $nginx_server_extra (if set) is added inside the server block, e.g. a location with auth_basic.
start_nginx() {
  local root port=$2 tls=""
  [[ $# -ge 4 ]] && tls="ssl; ssl_certificate $(realpath -- "$3"); ssl_certificate_key $(realpath -- "$4")"
  root=$(realpath -- "$1")
  servers_tmp
  if ! command -v nginx >/dev/null; then
    echo "servers.sh: nginx is not installed (scripts/install-deps.sh --test)" >&2
    return 1
  fi
  local prefix=$servers_dir/nginx-$port
  mkdir -p "$prefix/tmp" "$prefix/logs"
  local user=""
  # As root, nginx's workers would switch to 'nobody', who may not read ROOT_DIR.
  (($(id -u) == 0)) && user="user root root;"
  cat >"$prefix/nginx.conf" <<CONF
$user
worker_processes 2;
daemon off;
pid $prefix/nginx.pid;
error_log $prefix/error.log warn;
events { worker_connections 1024; }
http {
  access_log off; sendfile on; tcp_nopush on; keepalive_requests 100000; keepalive_timeout 120s;
  client_body_temp_path $prefix/tmp/body; proxy_temp_path $prefix/tmp/proxy; fastcgi_temp_path $prefix/tmp/fcgi;
  uwsgi_temp_path $prefix/tmp/uwsgi; scgi_temp_path $prefix/tmp/scgi;
  default_type application/octet-stream;
  # PUT for http:// writes (feedline gen, the conformance suite): WebDAV's, written atomically.
  # Directories list as JSON (feedline lists directory URLs and sizes brace lists from them).
  server { listen 127.0.0.1:$port $tls; root $root; dav_methods PUT DELETE; create_full_put_path on;
           client_max_body_size 0; autoindex on; autoindex_format json; ${nginx_server_extra:-} }
}
CONF
  local log=$servers_dir/nginx-$port.log
  nginx -c "$prefix/nginx.conf" -p "$prefix" >"$log" 2>&1 </dev/null &
  servers_started nginx "$port" $! quit "$log" || { cat "$prefix/error.log" >&2 2>/dev/null; return 1; }
}

# start_s3proxy UPSTREAM_PORT PORT [OPTIONS...]: tests/servers/s3proxy.py in front of
# 127.0.0.1:UPSTREAM_PORT (options: s3proxy.py --help).
start_s3proxy() {
  local upstream=$1 port=$2
  shift 2
  servers_tmp
  local log=$servers_dir/s3proxy-$port.log
  "$servers_py" "$servers_root/s3proxy.py" --listen "$port" --upstream "$upstream" "$@" >"$log" 2>&1 </dev/null &
  servers_started s3proxy "$port" $! term "$log"
}

# stop_servers: stops every server started here (nginx with QUIT, the others with TERM; KILL after
# 10 s), waits for each to exit, and removes $servers_dir (unless SERVERS_KEEP=1). Idempotent.
stop_servers() {
  local i pid
  for ((i = ${#servers_pids[@]} - 1; i >= 0; i--)); do
    pid=${servers_pids[i]}
    if [[ ${servers_kinds[i]} == quit ]]; then kill -QUIT "$pid" 2>/dev/null; else kill -TERM "$pid" 2>/dev/null; fi
  done
  for ((i = ${#servers_pids[@]} - 1; i >= 0; i--)); do
    pid=${servers_pids[i]}
    local n=0
    while kill -0 "$pid" 2>/dev/null && ((n < 100)); do sleep 0.1; n=$((n + 1)); done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true  # (its exit status is not ours: callers may run under set -e)
  done
  servers_pids=()
  servers_kinds=()
  if [[ -n $servers_dir && -d $servers_dir && ${SERVERS_KEEP:-0} != 1 ]]; then rm -rf -- "$servers_dir"; fi
  servers_dir=""
  return 0
}

# servers_cleanup_on_exit: stop_servers on EXIT, and on INT/TERM (then exit 130/143).
servers_cleanup_on_exit() {
  trap stop_servers EXIT
  trap 'stop_servers; trap - EXIT; exit 130' INT
  trap 'stop_servers; trap - EXIT; exit 143' TERM
}

# s3_env PORT: exports what /usr/bin/aws needs to talk to s3rver on PORT (any key works there;
# tests that verify signatures put s3proxy.py in front and use its port).
s3_env() {
  export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-S3RVER}
  export AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-S3RVER}
  export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1}
  export AWS_REGION=${AWS_REGION:-$AWS_DEFAULT_REGION}
  export AWS_EC2_METADATA_DISABLED=true
  export AWS_PAGER=""
  unset AWS_PROFILE AWS_ENDPOINT_URL
  s3_endpoint=http://127.0.0.1:$1
}

# awscli ARGS...: Debian's aws-cli 2 against $s3_endpoint (s3_env first).
awscli() { /usr/bin/aws --endpoint-url "$s3_endpoint" "$@"; }

# s3_upload DIR S3_PREFIX: `aws s3 cp --recursive DIR S3_PREFIX` (S3_PREFIX like s3://bench/ds/,
# ending in '/'), then checks every object's size in a listing and uploads again those that differ.
# s3rver 3.7.1 answers a PUT before its write to disk has finished and ignores write errors: on a
# loaded machine an object can be left empty although the PUT succeeded. Returns 1 (output in
# $servers_dir/upload.log) when the sizes still differ after two repairs.
s3_upload() {
  local dir=$1 prefix=$2 log
  servers_tmp
  log=$servers_dir/upload.log
  awscli s3 cp --recursive --only-show-errors "$dir" "$prefix" >"$log" 2>&1 || { cat "$log" >&2; return 1; }
  local round bad
  for round in 1 2 3; do
    bad=$(awscli s3 ls --recursive "$prefix" 2>>"$log" | "$servers_py" -c '
import os, sys
root, prefix = sys.argv[1], sys.argv[2]
bucket_prefix = prefix[5:].split("/", 1)[1] if prefix.count("/") > 2 else ""
remote = {}
for line in sys.stdin:
    parts = line.split(None, 3)
    if len(parts) == 4:
        remote[parts[3].rstrip("\n")] = int(parts[2])
for d, _, files in os.walk(root):
    for f in files:
        p = os.path.join(d, f)
        key = bucket_prefix + os.path.relpath(p, root)
        if remote.get(key) != os.path.getsize(p):
            print(os.path.relpath(p, root))
' "$dir" "$prefix")
    [[ -z $bad ]] && return 0
    ((round == 3)) && break
    echo "servers.sh: s3rver stored $(wc -l <<<"$bad") object(s) with the wrong size under $prefix; uploading them again" >&2
    local f
    while IFS= read -r f; do awscli s3 cp --only-show-errors "$dir/$f" "$prefix$f" >>"$log" 2>&1; done <<<"$bad"
  done
  echo "servers.sh: objects under $prefix still have the wrong size after two repairs: $(head -n 5 <<<"$bad" | tr '\n' ' ')" >&2
  return 1
}
