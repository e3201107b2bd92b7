#!/usr/bin/env bash
# Tests the Helm chart (helm/countersign) offline: lint, render with the defaults and
# with tests/helm/values-production.yaml, strict validation against a pinned
# Kubernetes version, and the assertions in tests/helm/test_chart.py.
#
# The Python packages live in a venv outside the repository, made on first use and
# remade when tests/helm/requirements.txt changes:
#   ${COUNTERSIGN_HELM_VENV:-/tmp/countersign-helm-venv}
# As root on Debian it installs python3-venv when the venv module is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv="${COUNTERSIGN_HELM_VENV:-/tmp/countersign-helm-venv}"
requirements="tests/helm/requirements.txt"

venv_is_current() {
    [ -x "$venv/bin/python" ] \
        && cmp -s "$requirements" "$venv/countersign-requirements.txt" \
        && "$venv/bin/python" -c 'import helm_python, kubernetes_validate, yaml' 2>/dev/null
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
    echo "==> making the chart test's venv in $venv" >&2
    python3 -c 'import sys; assert sys.version_info >= (3, 11), "tomllib needs Python 3.11+"'
    # Debian ships ensurepip (which venv needs) in python3-venv.
    python3 -c 'import venv, ensurepip' 2>/dev/null || install_venv_module
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --requirement "$requirements"
    cp "$requirements" "$venv/countersign-requirements.txt"
fi

exec "$venv/bin/python" -B tests/helm/test_chart.py
