#!/usr/bin/env bash
# https://: certificates are verified by default (an unknown CA is a clear error pointing at
# --ca-bundle), --ca-bundle trusts a given CA, and --insecure skips the checks and says so.
# nginx serves TLS with a certificate made here for 127.0.0.1.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
source "$here/../servers/servers.sh"
cli_init "$@"
servers_cleanup_on_exit

mkdir -p "$scratch/www/ds"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$scratch/key.pem" -out "$scratch/cert.pem" 2>/dev/null ||
  { echo "FAIL: openssl could not make a certificate"; exit 1; }
head -c 3014656 /dev/urandom >"$scratch/www/obj.bin"
port=$(free_port)
start_nginx "$scratch/www" "$port" "$scratch/cert.pem" "$scratch/key.pem" || exit 1
url=https://127.0.0.1:$port/obj.bin

# A certificate the server shows that we cannot verify: the storage said no (exit 1).
expect_runtime "unknown CA" "$url" "--ca-bundle" -- bench storage "$url" --bs 64k --connect-timeout 5s

checks=$((checks + 1))
if must_run "trusted CA" bench storage "$url" --bs 64k --ca-bundle "$scratch/cert.pem" --output json; then
  got=$(json_get "$out" 'd["bytes"]')
  if [[ $got == 3014656 ]]; then echo "ok: --ca-bundle reads all 3014656 bytes over TLS"; else fail "--ca-bundle read $got bytes"; fi
fi

checks=$((checks + 1))
if must_run "insecure" bench storage "$url" --bs 64k --insecure; then
  if grep -q "NOT verified" "$err"; then echo "ok: --insecure works and says certificates are not verified"
  else fail "--insecure did not say so on stderr"; show stderr "$err"; fi
fi

# A dataset over TLS, named with brace notation (no listing on plain HTTP servers).
"$bin" gen "$scratch/www/ds" --format files --samples 20 --sample-size 4k >/dev/null || fail "gen"
checks=$((checks + 1))
if must_run "run over https" run "https://127.0.0.1:$port/ds/{000000..000019}.bin" --format files \
  --ca-bundle "$scratch/cert.pem" --json "$scratch/run.json"; then
  n=$(json_get "$scratch/run.json" 'd["delivered"]["samples"]')
  [[ $n == 20 ]] && echo "ok: 20 samples delivered over https" || fail "delivered $n samples, expected 20"
fi
finish https_tls
