#!/usr/bin/python3
"""A verifying, fault-injecting HTTP proxy for the S3/HTTP tests (Debian's /usr/bin/python3).

Forwards every request to an upstream HTTP server (s3rver or nginx) and returns its response, over
HTTP/1.1 keep-alive connections on both sides. Optionally:

  --verify-sigv4 ACCESS_KEY:SECRET  recompute every request's AWS Signature V4 with botocore (an
                                    implementation independent of the client's) from the request's
                                    own x-amz-date, x-amz-content-sha256 and signed-headers list;
                                    a mismatch, an unknown key or a body that does not match its
                                    declared SHA-256 gets 403 and an S3 XML error, as AWS answers
  --require-auth                    refuse unsigned requests (403 AccessDenied), as a private bucket does
  --fail-503 N:K                    after every N requests, K consecutive 503 SlowDown answers
  --reset-mid-body P|every:N        send the headers and part of the body, then reset (RST) the connection
  --truncate P|every:N              send the full Content-Length, half the body, then close (FIN)
  --slow-first-byte MS:P|MS:every:N wait MS milliseconds before the response's first byte
  --no-range                        drop Range headers: always 200 with the whole body
  --seed S                          the faults' random draws (deterministic in request order)
  --stats FILE                      JSON counters, rewritten after every request and at exit

Body faults (reset, truncate) apply to GET responses with a body of at least 2 bytes. Nothing it
prints or writes ever contains a header value (Authorization above all) or a secret.
Exit with SIGTERM or SIGINT; the stats file is complete then.
"""

import argparse
import hashlib
import http.client
import http.server
import json
import os
import random
import signal
import socket
import socketserver
import struct
import threading
import time
import urllib.parse
import uuid

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
              "te", "trailer", "transfer-encoding", "upgrade", "expect"}
CHUNK = 256 * 1024
UNSIGNED_PAYLOADS = {"UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"}


class Rate:
    """A fault rate: a probability ('0.1') or every Nth eligible response ('every:5')."""

    def __init__(self, text):
        self.every = 0
        self.p = 0.0
        if text.startswith("every:"):
            self.every = int(text[6:])
            if self.every < 1:
                raise ValueError("every:N needs N >= 1")
        else:
            self.p = float(text)
            if not 0.0 <= self.p <= 1.0:
                raise ValueError("a probability is between 0 and 1")
        self.seen = 0

    def draw(self, rng):
        """Called under the state lock, once per eligible response."""
        self.seen += 1
        if self.every:
            return self.seen % self.every == 0
        return rng.random() < self.p


class State:
    def __init__(self, args):
        self.lock = threading.Lock()
        self.rng = random.Random(args.seed)
        self.args = args
        self.fail503 = None
        if args.fail_503:
            n, k = args.fail_503.split(":")
            self.fail503 = (int(n), int(k))
            if self.fail503[0] < 0 or self.fail503[1] < 1:
                raise ValueError("--fail-503 N:K needs N >= 0, K >= 1")
        self.reset = Rate(args.reset_mid_body) if args.reset_mid_body else None
        self.truncate = Rate(args.truncate) if args.truncate else None
        self.slow_ms = 0
        self.slow = None
        if args.slow_first_byte:
            ms, rate = args.slow_first_byte.split(":", 1)
            self.slow_ms = int(ms)
            self.slow = Rate(rate)
        self.keys = {}
        if args.verify_sigv4:
            key, _, secret = args.verify_sigv4.partition(":")
            if not key or not secret:
                raise ValueError("--verify-sigv4 needs ACCESS_KEY:SECRET")
            self.keys[key] = secret
        self.stats = {
            "requests": 0, "forwarded": 0, "bytes_sent": 0, "upstream_errors": 0,
            "by_method": {}, "by_status": {},
            "faults": {"fail_503": 0, "reset_mid_body": 0, "truncate": 0, "slow_first_byte": 0, "range_dropped": 0},
            "sigv4": {"verified": 0, "failed": 0, "unsigned": 0, "failures": {}},
        }
        self.stats_path = args.stats
        self.write_stats()

    def write_stats(self):
        if not self.stats_path:
            return
        tmp = "%s.tmp.%d" % (self.stats_path, threading.get_ident())
        with open(tmp, "w") as f:
            json.dump(self.stats, f, indent=1, sort_keys=True)
        os.replace(tmp, self.stats_path)

    def bump(self, *path, by=1):
        d = self.stats
        for p in path[:-1]:
            d = d.setdefault(p, {})
        d[path[-1]] = d.get(path[-1], 0) + by


STATE = None


def s3_error(code, message, resource=""):
    rid = uuid.uuid4().hex[:16].upper()
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>'
            '<Resource>%s</Resource><RequestId>%s</RequestId></Error>' % (code, message, resource, rid)).encode()


def parse_authorization(value):
    """'AWS4-HMAC-SHA256 Credential=AK/20240101/us-east-1/s3/aws4_request, SignedHeaders=a;b, Signature=hex'."""
    algo, _, rest = value.strip().partition(" ")
    if algo != "AWS4-HMAC-SHA256":
        return None
    fields = {}
    for part in rest.split(","):
        k, _, v = part.strip().partition("=")
        fields[k.strip()] = v.strip()
    cred = fields.get("Credential", "").split("/")
    if len(cred) != 5 or cred[4] != "aws4_request" or "SignedHeaders" not in fields or "Signature" not in fields:
        return None
    return {"key": cred[0], "date": cred[1], "region": cred[2], "service": cred[3],
            "signed": [h.strip().lower() for h in fields["SignedHeaders"].split(";") if h.strip()],
            "signature": fields["Signature"]}


def verify_sigv4(method, raw_path, headers, body, keys):
    """Returns (ok, error code, message). headers: list of (name, value) as received."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.compat import HTTPHeaders
    from botocore.credentials import Credentials

    auth_value = None
    for n, v in headers:
        if n.lower() == "authorization":
            auth_value = v
    a = parse_authorization(auth_value or "")
    if a is None:
        return False, "AuthorizationHeaderMalformed", "The authorization header is malformed."
    if a["key"] not in keys:
        return False, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
    lower = {}
    for n, v in headers:
        ln = n.lower()
        lower[ln] = v if ln not in lower else lower[ln] + "," + v
    amz_date = lower.get("x-amz-date", "")
    for required in ("host", "x-amz-date"):
        if required not in a["signed"]:
            return False, "AccessDenied", "The signed headers must include %s." % required
    if not amz_date.startswith(a["date"]) or len(amz_date) != 16:
        return False, "AuthorizationHeaderMalformed", "The credential scope date does not match x-amz-date."
    content_sha = lower.get("x-amz-content-sha256")
    if content_sha is None:
        return False, "InvalidRequest", "Missing required header for this request: x-amz-content-sha256"
    if content_sha not in UNSIGNED_PAYLOADS and not content_sha.startswith("STREAMING-"):
        if hashlib.sha256(body).hexdigest() != content_sha:
            return False, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed."
    for h in a["signed"]:
        if h not in lower:
            return False, "AccessDenied", "The signed header '%s' is missing from the request." % h

    class Verifier(S3SigV4Auth):
        # Exactly the headers the request declares it signed (botocore would pick its own set).
        def headers_to_sign(self, request):
            m = HTTPHeaders()
            for h in a["signed"]:
                m[h] = lower[h]
            return m

    path, _, query = raw_path.partition("?")
    params = {}
    if query:
        for pair in query.split("&"):
            k, _, v = pair.partition("=")
            params[urllib.parse.unquote(k)] = urllib.parse.unquote(v)
    req_headers = {h: lower[h] for h in a["signed"]}
    req_headers["x-amz-content-sha256"] = content_sha  # the canonical request's payload line, as AWS takes it
    req = AWSRequest(method=method, url="http://%s%s" % (lower["host"], path), data=body,
                     headers=req_headers, params=params)
    req.context["timestamp"] = amz_date
    auth = Verifier(Credentials(a["key"], keys[a["key"]]), a["service"], a["region"])
    canonical = auth.canonical_request(req)
    want = auth.signature(auth.string_to_sign(req, canonical), req)
    if want != a["signature"]:
        return False, "SignatureDoesNotMatch", ("The request signature we calculated does not match the signature "
                                                "you provided. Check your key and signing method.")
    return True, None, None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "feedline-s3proxy"
    sys_version = ""

    def log_message(self, fmt, *args):  # never log: request lines may be long, headers are secret
        pass

    def _upstream(self):
        conn = getattr(self, "_conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(STATE.args.upstream_host, STATE.args.upstream_port, timeout=60)
            self._conn = conn
        return conn

    def _read_body(self):
        te = self.headers.get("Transfer-Encoding", "").lower()
        if "chunked" in te:
            parts = []
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline(3)
            return b"".join(parts)
        n = int(self.headers.get("Content-Length", "0") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _send_simple(self, status, body, extra=()):
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        with STATE.lock:
            STATE.bump("by_status", str(status))
            STATE.write_stats()

    def _abort(self, rst):
        try:
            self.wfile.flush()
        except OSError:
            pass
        if rst:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            try:
                self.connection.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        self.close_connection = True
        self.connection.close()

    def _handle(self):
        body = self._read_body()
        headers = list(self.headers.items())
        signed = any(n.lower() == "authorization" for n, _ in headers)
        with STATE.lock:
            STATE.stats["requests"] += 1
            STATE.bump("by_method", self.command)
            n503 = STATE.stats["requests"] - 1
        resource = urllib.parse.unquote(self.path.partition("?")[0])

        if STATE.keys:
            if signed:
                ok, code, message = verify_sigv4(self.command, self.path, headers, body, STATE.keys)
                with STATE.lock:
                    if ok:
                        STATE.bump("sigv4", "verified")
                    else:
                        STATE.bump("sigv4", "failed")
                        STATE.bump("sigv4", "failures", code)
                if not ok:
                    return self._send_simple(403, s3_error(code, message, resource))
            else:
                with STATE.lock:
                    STATE.bump("sigv4", "unsigned")
                if STATE.args.require_auth:
                    return self._send_simple(403, s3_error("AccessDenied", "Access Denied", resource))

        if STATE.fail503:
            n, k = STATE.fail503
            if n503 % (n + k) >= n:
                with STATE.lock:
                    STATE.bump("faults", "fail_503")
                return self._send_simple(503, s3_error("SlowDown", "Please reduce your request rate.", resource),
                                         [("Retry-After", "0")])

        fwd = {}
        for name, value in headers:
            ln = name.lower()
            if ln in HOP_BY_HOP:
                continue
            if STATE.args.no_range and ln in ("range", "if-range"):
                if ln == "range":
                    with STATE.lock:
                        STATE.bump("faults", "range_dropped")
                continue
            fwd[name] = value
        if body or self.command in ("PUT", "POST"):
            fwd["Content-Length"] = str(len(body))
        conn = self._upstream()
        resp = None
        for attempt in range(2):  # a kept-alive upstream connection may have been closed: retry once
            try:
                conn.request(self.command, self.path, body=body or None, headers=fwd)
                resp = conn.getresponse()
                break
            except (OSError, http.client.HTTPException):
                conn.close()
                if attempt == 1:
                    with STATE.lock:
                        STATE.bump("upstream_errors")
                    return self._send_simple(502, s3_error("BadGateway", "The upstream server did not answer.", resource))
        with STATE.lock:
            STATE.stats["forwarded"] += 1

        length = resp.getheader("Content-Length")
        data = None
        if self.command == "HEAD" or resp.status in (204, 304):
            length = int(length or 0)
            has_body = False
        elif length is None:
            data = resp.read()
            length = len(data)
            has_body = True
        else:
            length = int(length)
            has_body = True

        fault = None
        slow = False
        with STATE.lock:
            if self.command == "GET" and has_body and length >= 2:
                if STATE.reset and STATE.reset.draw(STATE.rng):
                    fault = "reset_mid_body"
                elif STATE.truncate and STATE.truncate.draw(STATE.rng):
                    fault = "truncate"
            if STATE.slow and STATE.slow.draw(STATE.rng):
                slow = True
            if fault:
                STATE.bump("faults", fault)
            if slow:
                STATE.bump("faults", "slow_first_byte")
            STATE.bump("by_status", str(resp.status))
        if slow:
            time.sleep(STATE.slow_ms / 1000.0)

        self.send_response(resp.status, resp.reason)
        for name, value in resp.getheaders():
            if name.lower() in HOP_BY_HOP or name.lower() == "content-length":
                continue
            self.send_header(name, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        sent = 0
        limit = length if fault is None else length // 2
        if has_body:
            if data is not None:
                self.wfile.write(data[:limit])
                sent = limit
            else:
                while sent < length:
                    chunk = resp.read(min(CHUNK, length - sent))
                    if not chunk:
                        break  # the upstream fell short: the client sees a short body
                    if fault is not None and sent + len(chunk) >= limit:
                        self.wfile.write(chunk[:limit - sent])
                        sent = limit
                        break
                    self.wfile.write(chunk)
                    sent += len(chunk)
        with STATE.lock:
            STATE.bump("bytes_sent", by=sent)
            STATE.write_stats()
        if fault is not None:
            conn.close()  # the rest of the upstream body is unread: drop that connection
            self._conn = None
            self._abort(rst=(fault == "reset_mid_body"))
        elif sent < length:
            conn.close()
            self._conn = None
            self.close_connection = True

    def _dispatch(self):
        try:
            self._handle()
        except (ConnectionError, BrokenPipeError, socket.timeout):
            self.close_connection = True

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_OPTIONS = _dispatch


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def main():
    global STATE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    ap.add_argument("--upstream", required=True, help="PORT or HOST:PORT of the upstream server")
    ap.add_argument("--verify-sigv4", metavar="ACCESS_KEY:SECRET")
    ap.add_argument("--require-auth", action="store_true")
    ap.add_argument("--fail-503", metavar="N:K")
    ap.add_argument("--reset-mid-body", metavar="P|every:N")
    ap.add_argument("--truncate", metavar="P|every:N")
    ap.add_argument("--slow-first-byte", metavar="MS:P")
    ap.add_argument("--no-range", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--stats", metavar="FILE")
    args = ap.parse_args()
    host, _, port = args.upstream.rpartition(":")
    args.upstream_host = host or "127.0.0.1"
    args.upstream_port = int(port)
    try:
        STATE = State(args)
    except ValueError as e:
        ap.error(str(e))
    if STATE.keys:
        import botocore.auth  # noqa: F401  (fail now, not on the first request)

    server = Server(("127.0.0.1", args.listen), Handler)

    def stop(signum, frame):
        with STATE.lock:
            STATE.write_stats()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever(poll_interval=0.2)


if __name__ == "__main__":
    main()
