# shellcheck shell=bash
# shellcheck disable=SC2154  # bin, scratch, py, net, out, err: set by lib.sh and the sourcing section
# The network sections' test servers (sourced by robustness/network.sh and robustness/interrupts.sh
# after they set $net, the folder of their servers' files), and no_secret().


# --- test servers ------------------------------------------------------------------------------
# One Python script, several modes, on a port of the kernel's choosing (written to a file); every
# request line goes to PORTFILE.log:
#   silent              accepts and never answers
#   trickle SIZE        HEAD: 200 with Content-Length SIZE at once; GET: the headers at once, then
#                       one body byte per second
#   auth USER PASS SIZE HTTP Basic authentication required (401 otherwise); HEAD and ranged GETs
#                       of SIZE bytes of 'x'
# Servers whose answers are wrong (objects of SIZE bytes of a pattern; HEAD answers 200 unless
# said otherwise):
#   shifted SIZE        a ranged GET of bytes a-b gets bytes a+1..b+1 (or to the end), truthfully
#                       labelled (206)
#   norange SIZE|DIR    ignores Range: 200 with the whole object (DIR: its files, by base name)
#   overlong SIZE       right answers, then, 50 ms later, stray bytes past their Content-Length
#   redirect            every request: 301 to a URL with a signature in its query
#   e500                every request: 500
#   retryafter SIZE S   GETs: 503 with Retry-After: S
#   s3 LISTING          S3: ListObjectsV2 answers by LISTING: "hostile" (keys outside the prefix,
#                       with '..' segments, one twice), "loop" (the same continuation token on
#                       every page), "pages:N" (N pages of 1000 keys; every object 404); objects
#                       of 1000 bytes
# Each ends by itself when the shell that started it goes, or after 10 minutes.
cat >"$net/server.py" <<'EOF'
import base64, os, re, socket, sys, threading, time
mode, args = sys.argv[2], sys.argv[3:]
parent, born = os.getppid(), time.time()
log = open(sys.argv[1] + ".log", "a", buffering=1)

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
        parts = lines[0].split(b" ")
        log.write("%s %s\n" % (parts[0].decode(), parts[1].decode()))
        yield parts[0], hdrs, parts[1].decode()

def byte_range(hdrs, size):
    r = hdrs.get(b"range")
    if not r:
        return None
    a, b = r.split(b"=")[1].split(b"-")
    return int(a), min(int(b), size - 1)

def pattern(a, n):
    return bytes((i * 7 + 3) % 251 for i in range(a, a + n))

def reply(c, status, body=b"", headers=()):
    head = "HTTP/1.1 %s\r\nContent-Length: %d\r\n" % (status, len(body))
    c.sendall((head + "".join(h + "\r\n" for h in headers) + "\r\n").encode() + body)

def list_page(keys, token=None):
    x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><Name>b</Name>"
    for k, n in keys:
        x += "<Contents><Key>%s</Key><Size>%d</Size></Contents>" % (k, n)
    x += "<IsTruncated>%s</IsTruncated>" % ("true" if token else "false")
    if token:
        x += "<NextContinuationToken>%s</NextContinuationToken>" % token
    return (x + "</ListBucketResult>").encode()

def s3(c, method, hdrs, target):
    if "list-type=2" in target:
        if args[0] == "hostile":
            keys = [("p/a.bin", 1000), ("p/../../etc/passwd", 1000), ("q/outside.bin", 1000),
                    ("p/a.bin", 1000), ("p/b.bin", 1000)]
            reply(c, "200 OK", list_page(keys))
        elif args[0] == "loop":
            reply(c, "200 OK", list_page([("p/a.bin", 1000)], "same-token"))
        else:
            pages = int(args[0].split(":")[1])
            m = re.search(r"continuation-token=(\d+)", target)
            page = int(m.group(1)) if m else 0
            keys = [("p/%04d/%06d-a-longer-key-name.bin" % (page, i), 1000) for i in range(1000)]
            reply(c, "200 OK", list_page(keys, str(page + 1) if page + 1 < pages else None))
        return
    if args[0].startswith("pages"):  # the listing is what is tested: no object is there
        reply(c, "404 Not Found", b"<Error><Code>NoSuchKey</Code><Message>no</Message></Error>")
        return
    if method == b"HEAD":
        reply(c, "200 OK", headers=["Content-Length: 1000"])
        return
    rng = byte_range(hdrs, 1000)
    a, b = rng or (0, 999)
    if rng:
        reply(c, "206 Partial Content", pattern(a, b - a + 1), ["Content-Range: bytes %d-%d/1000" % (a, b)])
    else:
        reply(c, "200 OK", pattern(0, 1000))

def head_only(c, size):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)

def hostile(c, method, hdrs, target):
    if mode == "redirect":
        reply(c, "301 Moved Permanently", b"moved",
              ["Location: http://elsewhere.example:8080/new/path?X-Amz-Signature=deadbeefsig0123"])
        return
    if mode == "e500":
        reply(c, "500 Internal Server Error", b"boom")
        return
    if mode == "s3":
        s3(c, method, hdrs, target)
        return
    if mode == "norange" and os.path.isdir(args[0]):  # files of a directory, Range ignored
        path = os.path.join(args[0], os.path.basename(target.split("?")[0]))
        if not os.path.isfile(path):
            reply(c, "404 Not Found", b"no")
        elif method == b"HEAD":
            head_only(c, os.path.getsize(path))
        else:
            with open(path, "rb") as f:
                reply(c, "200 OK", f.read())
        return
    size = int(args[0])
    if method == b"HEAD":
        head_only(c, size)
        return
    if mode == "retryafter":
        reply(c, "503 Service Unavailable", b"slow down", ["Retry-After: " + args[1]])
        return
    rng = byte_range(hdrs, size)
    a, b = rng or (0, size - 1)
    if mode == "norange" or not rng:
        reply(c, "200 OK", pattern(0, size))
    elif mode == "shifted" and a + 1 < size:
        b = min(b + 1, size - 1)
        reply(c, "206 Partial Content", pattern(a + 1, b - a),
              ["Content-Range: bytes %d-%d/%d" % (a + 1, b, size)])
    else:
        reply(c, "206 Partial Content", pattern(a, b - a + 1), ["Content-Range: bytes %d-%d/%d" % (a, b, size)])
    if mode == "overlong":
        time.sleep(0.05)
        c.sendall(b"STRAY BYTES PAST THE CONTENT-LENGTH")

def serve(c):
    try:
        if mode == "silent":
            while c.recv(65536):
                pass
            return
        for method, hdrs, target in requests(c):
            if mode not in ("trickle", "auth"):
                hostile(c, method, hdrs, target)
                continue
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
