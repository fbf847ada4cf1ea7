#!/usr/bin/env bash
# Runs the official Azure Cosmos DB Python SDK against `ebbdb serve` (cli/tests/sdk/).
# Creates the venv and installs requirements.txt when missing; an install failure fails the
# run (exit 1) loudly, it is never skipped. Builds the `ebbdb` binary first.
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
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" test_python_sdk.py
