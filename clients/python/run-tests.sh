#!/usr/bin/env bash
# Tests the Python client (clients/python) against the real `countersign`
# binary: pytest starts `serve` on free ports with fresh data directories.
#
#   clients/python/run-tests.sh [pytest arguments]
#
# The binary is COUNTERSIGN_BIN, default target/debug/countersign (build it
# first: `cargo build -p countersign`). The Python packages live in a venv
# outside the repository, made on first use and remade when
# requirements-test.txt changes (tests/services/python-venv.sh):
#   ${COUNTERSIGN_PYTHON_VENV:-/tmp/countersign-python-venv}
# made with ${COUNTERSIGN_PYTHON:-python3}, 3.9 or newer.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

venv="${COUNTERSIGN_PYTHON_VENV:-/tmp/countersign-python-venv}"
export COUNTERSIGN_BIN="${COUNTERSIGN_BIN:-$repo/target/debug/countersign}"
if [ ! -x "$COUNTERSIGN_BIN" ]; then
    echo "no countersign binary at $COUNTERSIGN_BIN: run \`cargo build -p countersign\` first (or set COUNTERSIGN_BIN)" >&2
    exit 1
fi

"$repo/tests/services/python-venv.sh" "$venv" "$here/requirements-test.txt" 3.9 'import grpc, grpc_tools, google.protobuf, pytest'

cd "$here"
exec "$venv/bin/python" -B -m pytest -p no:cacheprovider "$@"
