#!/usr/bin/env bash
# Tests the Helm chart (helm/countersign) offline: lint, render with the defaults and
# with tests/helm/values-production.yaml, strict validation against a pinned
# Kubernetes version, and the assertions in tests/helm/test_chart.py.
#
# The Python packages live in a venv outside the repository, made on first use and
# remade when tests/helm/requirements.txt changes (tests/services/python-venv.sh):
#   ${COUNTERSIGN_HELM_VENV:-/tmp/countersign-helm-venv}
set -euo pipefail
cd "$(dirname "$0")/../.."

venv="${COUNTERSIGN_HELM_VENV:-/tmp/countersign-helm-venv}"
# tomllib needs Python 3.11+.
tests/services/python-venv.sh "$venv" tests/helm/requirements.txt 3.11 'import helm_python, kubernetes_validate, yaml'

exec "$venv/bin/python" -B tests/helm/test_chart.py
