#!/usr/bin/env bash
# Tests the browser console in headless Chromium against the real
# `countersign` binary (a fresh database per run, free ports):
#   tests/console/run.sh [pytest arguments]
#
# Chromium is Debian's (/usr/bin/chromium, installed here as root when
# missing); Playwright for Python drives it. The Python packages live in a
# venv outside the repository, made on first use and remade when
# tests/console/requirements.txt changes (tests/services/python-venv.sh):
#   ${COUNTERSIGN_CONSOLE_VENV:-/tmp/countersign-console-venv}
# The binary is COUNTERSIGN_BIN, default target/debug/countersign. Screenshots
# of every page go to target/console-screenshots/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

export COUNTERSIGN_BIN="${COUNTERSIGN_BIN:-$repo/target/debug/countersign}"
if [ ! -x "$COUNTERSIGN_BIN" ]; then
    echo "no countersign binary at $COUNTERSIGN_BIN: run \`cargo build -p countersign\` first (or set COUNTERSIGN_BIN)" >&2
    exit 1
fi
# The server starts in its own data directory: a relative path would not name the binary there.
COUNTERSIGN_BIN="$(realpath "$COUNTERSIGN_BIN")"

export COUNTERSIGN_CHROMIUM="${COUNTERSIGN_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$COUNTERSIGN_CHROMIUM" ]; then
    echo "==> installing chromium (Debian's)" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "$COUNTERSIGN_CHROMIUM is missing and this is not root: install it (apt-get install chromium)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq chromium >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null; }
fi

venv="${COUNTERSIGN_CONSOLE_VENV:-/tmp/countersign-console-venv}"
"$repo/tests/services/python-venv.sh" "$venv" "$here/requirements.txt" 3.9 'import playwright.sync_api, pytest, grpc, google.protobuf'

export COUNTERSIGN_SCREENSHOTS="${COUNTERSIGN_SCREENSHOTS:-$repo/target/console-screenshots}"
mkdir -p "$COUNTERSIGN_SCREENSHOTS"
# The Python client's package and its test support (the server fixture).
export PYTHONPATH="$repo/clients/python/src:$repo/clients/python/tests${PYTHONPATH:+:$PYTHONPATH}"
cd "$here"
exec "$venv/bin/python" -B -m pytest -p no:cacheprovider "$@"
