#!/usr/bin/env bash
# Installs the npm packages the S3 tests start (s3rver, pinned in package-lock.json) into
# tests/servers/node_modules. Idempotent: does nothing when node_modules matches the lock.
# Needs node and npm (scripts/install-deps.sh --test); reaches the npm registry only when installing.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "tests/servers/setup.sh: node and npm are not installed (scripts/install-deps.sh --test); the S3 tests will fail" >&2
  exit 1
fi
# npm writes node_modules/.package-lock.json on install: newer than package-lock.json means current.
stamp=node_modules/.package-lock.json
if [[ -f $stamp && -f node_modules/s3rver/bin/s3rver.js && ! package-lock.json -nt $stamp && ! package.json -nt $stamp ]]; then
  exit 0
fi
echo "tests/servers/setup.sh: npm ci (s3rver)" >&2
npm ci --no-audit --no-fund --loglevel=error >&2
touch "$stamp"
