#!/usr/bin/env bash
# Runs the official Azure Cosmos DB SDKs against `ebbdb serve` (cli/tests/sdk/): Python
# (azure-cosmos, pytest) and JavaScript (@azure/cosmos, node's test runner).
# Creates the Python venv and installs requirements.txt, and installs js/package-lock.json with
# `npm ci`, when missing; an install failure fails the run (exit 1) loudly, it is never skipped.
# Builds the `ebbdb` binary first.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
venv="${EBBDB_SDK_VENV:-$root/target/sdk-venv}"
stamp="$venv/.requirements"

if [ ! -x "$venv/bin/python" ] || ! cmp -s "$here/requirements.txt" "$stamp"; then
  echo "sdk: creating the venv in $venv (pip install -r cli/tests/sdk/requirements.txt)"
  rm -rf "$venv"
  if ! python3 -m venv "$venv"; then
    echo "sdk: FAILED to create a Python venv (python3 -m venv) in $venv" >&2
    exit 1
  fi
  if ! "$venv/bin/pip" install --disable-pip-version-check -q -r "$here/requirements.txt"; then
    echo "sdk: FAILED to install the Python SDK test requirements from PyPI ($here/requirements.txt)" >&2
    rm -rf "$venv"
    exit 1
  fi
  cp "$here/requirements.txt" "$stamp"
fi

(cd "$root" && cargo build -q -p ebbdb-cli)
export EBBDB_BIN="$root/target/debug/ebbdb"
cd "$here"
echo "sdk: Python (azure-cosmos)"
"$venv/bin/python" -m pytest -q -p no:cacheprovider test_python_sdk.py

js="$here/js"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "sdk: FAILED: node and npm are needed for the JavaScript SDK test" >&2
  exit 1
fi
if [ ! -d "$js/node_modules/@azure/cosmos" ] || ! cmp -s "$js/package-lock.json" "$js/node_modules/.package-lock.ours"; then
  echo "sdk: installing the JavaScript SDK (npm ci in cli/tests/sdk/js)"
  if ! (cd "$js" && npm ci --no-audit --no-fund --loglevel=error); then
    echo "sdk: FAILED to install @azure/cosmos from the npm registry (cli/tests/sdk/js)" >&2
    exit 1
  fi
  cp "$js/package-lock.json" "$js/node_modules/.package-lock.ours"
fi
echo "sdk: JavaScript (@azure/cosmos)"
cd "$js"
node --test --test-reporter=spec sdk.test.mjs
