#!/usr/bin/env bash
# The Stream page's benchmark (tests/console/bench_stream.py) in the console
# tests' venv, against COUNTERSIGN_BIN (default target/debug/countersign;
# target/release/countersign for the recorded figures).
#   tests/console/run-bench.sh [--rate 200] [--seconds 60]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export COUNTERSIGN_BIN="${COUNTERSIGN_BIN:-$repo/target/debug/countersign}"
# The server starts in its own data directory: a relative path would not name the binary there.
COUNTERSIGN_BIN="$(realpath "$COUNTERSIGN_BIN")"
venv="${COUNTERSIGN_CONSOLE_VENV:-/tmp/countersign-console-venv}"
"$repo/tests/services/python-venv.sh" "$venv" "$here/requirements.txt" 3.9 'import playwright.sync_api, pytest, grpc, google.protobuf'
export PYTHONPATH="$repo/clients/python/src:$repo/clients/python/tests${PYTHONPATH:+:$PYTHONPATH}"
cd "$here"
exec "$venv/bin/python" -B bench_stream.py "$@"
