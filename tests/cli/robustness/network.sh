# shellcheck shell=bash
# The variables and helpers of tests/cli/lib.sh and tests/cli/robustness.sh are set there:
# shellcheck disable=SC2154
# Robustness section (sourced by tests/cli/robustness.sh): network storage that never lets a
# request finish, secrets in URLs, nfs:// URLs.
#  - HTTP/S3 servers that accept and never answer, or send a byte a second: Ctrl-C ends `run` and
#    `bench storage` within a second with 130, whatever they wait on (a HEAD, a listing, a read).
#  - A password in a URL (http://user:pass@host/...), a presigned URL's signature: in no output
#    (stdout, stderr, --json, --output json), whether the run succeeds, fails or is interrupted;
#    and the credentials are really sent (a server that wants them serves the data).
#  - nfs:// URLs: a port after the host, bad or unknown query parameters, credentials: exit 2 with
#    a message saying what to write; an NFS server that never answers: Ctrl-C ends it.
# Builds without libcurl / libnfs skip their part (FEEDLINE_TEST_HAVE_HTTP / _NFS, set by ctest).

net=$scratch/network
mkdir -p "$net"

# --- test servers ------------------------------------------------------------------------------
# One Python script, three modes, on a port of the kernel's choosing (written to a file):
#   silent              accepts and never answers
#   trickle SIZE        HEAD: 200 with Content-Length SIZE at once; GET: the headers at once, then
#                       one body byte per second
#   auth USER PASS SIZE HTTP Basic authentication required (401 otherwise); HEAD and ranged GETs
#                       of SIZE bytes of 'x'
# Each ends by itself when the shell that started it goes, or after 10 minutes.
cat >"$net/server.py" <<'EOF'
import base64, os, socket, sys, threading, time
mode, args = sys.argv[2], sys.argv[3:]
parent, born = os.getppid(), time.time()

def watchdog():
    while os.getppid() == parent and time.time() - born < 600:
        time.sleep(0.5)
    os._exit(0)

def requests(c):
    buf = b""
    while True:
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return
            buf += d
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        hdrs = {}
        for l in lines[1:]:
            k, _, v = l.partition(b":")
            hdrs[k.strip().lower()] = v.strip()
        n = int(hdrs.get(b"content-length", b"0"))
        while len(buf) < n:
            d = c.recv(65536)
            if not d:
                return
            buf += d
        buf = buf[n:]
        yield lines[0].split(b" ")[0], hdrs

def byte_range(hdrs, size):
    r = hdrs.get(b"range")
    if not r:
        return None
    a, b = r.split(b"=")[1].split(b"-")
    return int(a), min(int(b), size - 1)

def serve(c):
    try:
        if mode == "silent":
            while c.recv(65536):
                pass
            return
        for method, hdrs in requests(c):
            if mode == "auth":
                user, password, size = args[0], args[1], int(args[2])
                want = b"Basic " + base64.b64encode(("%s:%s" % (user, password)).encode())
                if hdrs.get(b"authorization") != want:
                    body = b"<html>401 Authorization Required</html>"
                    c.sendall(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"x\"\r\n"
                              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                    continue
            else:
                size = int(args[0])
            if method == b"HEAD":
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
                continue
            rng = byte_range(hdrs, size)
            a, b = rng or (0, size - 1)
            if rng:
                c.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Length: %d\r\nContent-Range: bytes %d-%d/%d\r\n\r\n"
                          % (b - a + 1, a, b, size))
            else:
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
            if mode == "trickle":
                for _ in range(b - a + 1):
                    c.sendall(b"x")
                    time.sleep(1)
            else:
                c.sendall(b"x" * (b - a + 1))
    except OSError:
        pass

threading.Thread(target=watchdog, daemon=True).start()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(128)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
conns = []
while True:
    c, _ = s.accept()
    conns.append(c)
    threading.Thread(target=serve, args=(c,), daemon=True).start()
EOF
net_pids=()
# net_server NAME MODE ARGS...: starts a server, sets net_port (exit 1 when it does not start).
net_server() {
  local name=$1; shift
  local portfile=$net/$name.port
  rm -f "$portfile"
  "$py" "$net/server.py" "$portfile" "$@" >"$net/$name.log" 2>&1 &
  net_pids+=("$!")
  local i
  for ((i = 0; i < 100; i++)); do
    [[ -s $portfile ]] && break
    sleep 0.05
  done
  if [[ ! -s $portfile ]]; then
    echo "FAIL: the test server '$name' ($*) did not start"
    show log "$net/$name.log"
    exit 1
  fi
  net_port=$(cat "$portfile")
}
# net_closed_port: a port nothing listens on (a moment ago).
net_closed_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }

# no_secret NAME FILE...: none of $net_secrets in any FILE (missing files are skipped).
net_secrets=()
no_secret() {
  local name=$1; shift
  checks=$((checks + 1))
  local f s hits=()
  for f in "$@"; do
    [[ -f $f ]] || continue
    for s in "${net_secrets[@]}"; do
      if grep -qF -- "$s" "$f"; then hits+=("$(basename "$f") holds '$s'"); fi
    done
  done
  if ((${#hits[@]} > 0)); then
    fail "$name: a secret was printed: ${hits[*]}"
    for f in "$@"; do [[ -f $f ]] && show "$(basename "$f")" "$f"; done
  else
    echo "ok: $name: no secret in $(printf '%s ' "${@##*/}")"
  fi
}

# --- HTTP and S3 -------------------------------------------------------------------------------
if [[ ${FEEDLINE_TEST_HAVE_HTTP:-0} != 1 ]]; then
  echo "skip: HTTP/S3 cases: this feedline was built without the HTTP object-store backend"
else
  # Ctrl-C while the server has accepted and answers nothing: the HEADs of a URL list, a
  # listing, a bench's HEAD. Each exits 130 within a second (not after the 30 s stall timeout).
  net_server silent silent
  silent=http://127.0.0.1:$net_port
  expect_interrupt "SIGINT, HTTP server never answers, run" --json "$net/int-silent-run.json" \
    -- run "$silent/x/{0..3}.bin" --json "$net/int-silent-run.json"
  expect_interrupt "SIGINT, HTTP server never answers, run of a directory URL" -- run "$silent/x/"
  expect_interrupt "SIGINT, HTTP server never answers, bench storage" -- bench storage "$silent/x.bin"
  expect_interrupt "SIGTERM, HTTP server never answers, bench storage" --term -- bench storage "$silent/x.bin"
  export AWS_ACCESS_KEY_ID=AKIDROBUSTNESS AWS_SECRET_ACCESS_KEY=robustness-secret-key AWS_REGION=us-east-1
  expect_interrupt "SIGINT, S3 endpoint never answers, run (ListObjectsV2)" -- run "s3://bucket/prefix/" --endpoint "$silent"
  expect_interrupt "SIGINT, S3 endpoint never answers, bench storage (HEAD)" -- bench storage "s3://bucket/obj.bin" --endpoint "$silent"
  unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION

  # Ctrl-C while the server sends a byte a second: the reads are cancelled.
  net_server trickle trickle $((64 << 20))
  trickle=http://127.0.0.1:$net_port
  expect_interrupt "SIGINT, HTTP server sends 1 byte per s, bench storage" --after 1.5 -- bench storage "$trickle/big.bin"
  expect_interrupt "SIGINT, HTTP server sends 1 byte per s, bench storage randread" --after 1.5 \
    -- bench storage "$trickle/big.bin" --rw randread --bs 4k --iodepth 8
  net_server trickle-small trickle 65536
  expect_interrupt "SIGINT, HTTP server sends 1 byte per s, run" --after 1.5 --json "$net/int-trickle-run.json" \
    -- run "http://127.0.0.1:$net_port/d/{0..3}.bin" --format files --json "$net/int-trickle-run.json"

  # Secrets: a password in the URL, a presigned URL's signature and credential.
  net_secrets=("hunter2pass" "S3cr3t@Pw" "S3cr3t%40Pw" "Wr0ngPw99" "deadbeefsig0123" "AKIAROBUSTCRED" "robustness-secret-key")
  closed=$(net_closed_port)
  expect_fail "password in the URL, server down, run" 1 "127.0.0.1:$closed" \
    -- run "http://user:hunter2pass@127.0.0.1:$closed/x/{0..3}.bin" --max-attempts 1 --json "$net/pw-run.json"
  no_secret "password in the URL, server down, run" "$out" "$err" "$net/pw-run.json"
  expect_fail "password in the URL, server down, bench --output json" 1 "127.0.0.1:$closed" \
    -- bench storage "http://user:hunter2pass@127.0.0.1:$closed/x.bin" --max-attempts 1 --output json
  no_secret "password in the URL, server down, bench --output json" "$out" "$err"
  expect_fail "presigned URL, server down, bench" 1 "127.0.0.1:$closed" \
    -- bench storage "http://127.0.0.1:$closed/x.bin?X-Amz-Credential=AKIAROBUSTCRED&X-Amz-Signature=deadbeefsig0123" \
    --max-attempts 1 --output json
  no_secret "presigned URL, server down, bench" "$out" "$err"
  expect_usage "credentials in an s3:// URL" "s3://" "not credentials" -- bench storage "s3://AKIA:hunter2pass@bucket/k.bin"
  no_secret "credentials in an s3:// URL" "$out" "$err"
  expect_usage "password in a URL of an unknown scheme" "unknown URL scheme" -- run "ftp://user:hunter2pass@127.0.0.1/x"
  no_secret "password in a URL of an unknown scheme" "$out" "$err"
  # Interrupted with a password in the URL: the partial report and the JSON hide it too.
  expect_interrupt "SIGINT with a password in the URL" --json "$net/pw-int.json" \
    -- run "http://user:hunter2pass@127.0.0.1:${silent##*:}/x/{0..3}.bin" --json "$net/pw-int.json"
  no_secret "SIGINT with a password in the URL" "$scratch/SIGINT with a password in the URL.out" \
    "$scratch/SIGINT with a password in the URL.err" "$net/pw-int.json"
  # A server that wants the password: the right one reads every byte (so it was sent), in text
  # and JSON reports without it; a wrong one is a 401 that does not show it.
  net_server auth auth reader 'S3cr3t@Pw' 100000
  auth=http://127.0.0.1:$net_port
  must_run "password in the URL, served" run "http://reader:S3cr3t%40Pw@127.0.0.1:$net_port/d/{0..3}.bin" --format files \
    --json "$net/pw-ok.json" && {
    checks=$((checks + 1))
    v=$(json_check "$net/pw-ok.json" "d['delivered']['samples'] == 4 and d['bytes'] == 400000 and d['io']['errors'] == 0" \
      "the run through Basic authentication did not deliver 4 samples of 100000 bytes")
    [[ -z $v ]] && echo "ok: password in the URL: sent as Basic authentication, 4 samples read" || fail "$v"
  }
  no_secret "password in the URL, served, run" "$out" "$err" "$net/pw-ok.json"
  must_run "password in the URL, served, bench --output json" bench storage "http://reader:S3cr3t%40Pw@127.0.0.1:$net_port/big.bin" \
    --rw read --bs 16k --output json
  no_secret "password in the URL, served, bench --output json" "$out" "$err"
  expect_fail "wrong password in the URL" 1 "401" "127.0.0.1:$net_port" \
    -- run "http://reader:Wr0ngPw99@127.0.0.1:$net_port/d/{0..3}.bin" --format files --json "$net/pw-wrong.json"
  no_secret "wrong password in the URL" "$out" "$err" "$net/pw-wrong.json"
  expect_fail "no password for a server that wants one" 1 "401" -- bench storage "$auth/big.bin" --output json
fi

# --- NFS ---------------------------------------------------------------------------------------
if [[ ${FEEDLINE_TEST_HAVE_NFS:-0} != 1 ]]; then
  echo "skip: nfs:// cases: this feedline was built without the NFS backend"
else
  expect_usage "nfs:// with a port after the host" "nfs://127.0.0.1:1/x" "the port belongs in ?nfsport=1" \
    "write nfs://127.0.0.1/x?nfsport=1" -- bench storage "nfs://127.0.0.1:1/x"
  expect_usage "nfs:// with a port after the host, run" "the port belongs in ?nfsport=2049" \
    -- run "nfs://127.0.0.1:2049/export/ds/?version=4"
  expect_usage "nfsport that is no number" "nfsport must be a number" "'abc'" \
    -- run "nfs://127.0.0.1/export/x?nfsport=abc"
  expect_usage "nfsport out of range" "nfsport must be a number from 1 to 65535" \
    -- bench storage "nfs://127.0.0.1/export/x?version=4&nfsport=70000"
  expect_usage "nfs version 5" "version must be 3 or 4" -- bench storage "nfs://127.0.0.1/export/x?version=5"
  expect_usage "nfs uid that is no number" "uid must be a number" -- run "nfs://127.0.0.1/export/x?uid=root"
  expect_usage "unknown nfs parameter" "unknown parameter 'verison'" "known: version, nfsport, mountport, uid, gid" \
    -- run "nfs://127.0.0.1/export/x?verison=4"
  expect_usage "nfs parameter given twice" "nfsport is given twice" \
    -- run "nfs://127.0.0.1/export/x?nfsport=1&nfsport=2"
  net_secrets=("hunter2nfs")
  expect_usage "credentials in an nfs:// URL" "no user name or password" -- run "nfs://root:hunter2nfs@127.0.0.1/export/x"
  no_secret "credentials in an nfs:// URL" "$out" "$err"
  # An NFS server that accepts and never answers (the silent server above, or a new one).
  net_server nfs-silent silent
  expect_interrupt "SIGINT, NFS server never answers, run" \
    -- run "nfs://127.0.0.1/export/ds?version=4&nfsport=$net_port"
  expect_interrupt "SIGINT, NFS server never answers, bench storage" \
    -- bench storage "nfs://127.0.0.1/export/ds/x.bin?version=4&nfsport=$net_port"
fi

for p in "${net_pids[@]}"; do kill "$p" 2>/dev/null || true; done
for p in "${net_pids[@]}"; do wait "$p" 2>/dev/null || true; done
net_pids=()
