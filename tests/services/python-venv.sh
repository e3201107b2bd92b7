#!/usr/bin/env bash
# Makes the Python venv a test runs in, outside the repository, or keeps it:
#   tests/services/python-venv.sh VENV REQUIREMENTS MIN_VERSION 'import a, b'
# It is (re)made when REQUIREMENTS differs from what it was made with or the
# imports fail, with ${COUNTERSIGN_PYTHON:-python3}, which must be MIN_VERSION
# (e.g. 3.11) or newer. As root on Debian it installs python3-venv when the venv
# module is missing. Nothing is printed on stdout.
set -euo pipefail

venv="$1"
requirements="$2"
min_version="$3"
imports="$4"
python="${COUNTERSIGN_PYTHON:-python3}"

venv_is_current() {
    [ -x "$venv/bin/python" ] \
        && cmp -s "$requirements" "$venv/countersign-requirements.txt" \
        && "$venv/bin/python" -c "$imports" 2>/dev/null
}

install_venv_module() {
    echo "==> installing python3-venv" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "python3's venv module is missing and this is not root: install it (apt-get install python3-venv)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq python3-venv >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null && apt-get install -y -qq python3-venv >/dev/null; }
}

if ! venv_is_current; then
    echo "==> making the venv $venv (for $requirements)" >&2
    "$python" -c "import sys; assert sys.version_info >= tuple(map(int, '$min_version'.split('.'))), 'Python $min_version+ is needed'"
    # Debian ships ensurepip (which venv needs) in python3-venv.
    "$python" -c 'import venv, ensurepip' 2>/dev/null || install_venv_module
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --requirement "$requirements" >&2
    cp "$requirements" "$venv/countersign-requirements.txt"
fi
