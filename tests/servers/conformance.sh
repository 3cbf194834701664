#!/usr/bin/env bash
# Runs the backend conformance suite (feedline_unit_tests "[conformance]") with real servers for
# the network rows: s3rver behind s3proxy.py (every request's SigV4 checked by botocore,
# unsigned requests refused) for s3://, and nginx (Range, WebDAV PUT) for http://.
# Usage: conformance.sh UNIT_TEST_BINARY
set -euo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=servers.sh
source "$here/servers.sh"
servers_cleanup_on_exit
servers_tmp
work=$servers_dir/conformance
mkdir -p "$work/s3" "$work/www/conformance"

s3_port=$(free_port)
start_s3rver "$work/s3" "$s3_port"
s3_env "$s3_port"
# s3rver knows one access key (S3RVER); the proxy checks signatures with its secret.
awscli s3 mb s3://conformance >/dev/null
proxy_port=$(free_port)
start_s3proxy "$s3_port" "$proxy_port" --verify-sigv4 "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" --require-auth \
  --stats "$work/proxy.json"
http_port=$(free_port)
start_nginx "$work/www" "$http_port"

export FEEDLINE_TEST_S3_URL=s3://conformance/run/
export FEEDLINE_TEST_S3_ENDPOINT=http://127.0.0.1:$proxy_port
export FEEDLINE_TEST_HTTP_URL=http://127.0.0.1:$http_port/conformance/
"$bin" "${FEEDLINE_CONFORMANCE_FILTER:-[conformance]~[nfs]}" -d yes

# Every request feedline signed must have verified independently.
/usr/bin/python3 - "$work/proxy.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["sigv4"]
print(f"sigv4 checked by botocore: {s['verified']} verified, {s['failed']} failed, {s['unsigned']} unsigned")
sys.exit(0 if s["verified"] > 0 and s["failed"] == 0 and s["unsigned"] == 0 else 1)
PY
