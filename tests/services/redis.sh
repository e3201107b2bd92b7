#!/usr/bin/env bash
# Starts the Redis the queue tests run against, on 127.0.0.1:6390, unless
# something already answers there; installs redis-server first if it is
# missing (as root, from Debian's packages). Idempotent. Prints the line to
# export; when sourced it also exports it:
#   . tests/services/redis.sh      or      eval "$(tests/services/redis.sh)"
set -euo pipefail

port="${COUNTERSIGN_TEST_REDIS_PORT:-6390}"
url="redis://127.0.0.1:${port}"

answers() {
    [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = "PONG" ]
}

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    echo "==> installing redis-server" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "redis-server is missing and this is not root: install it (apt-get install redis-server)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq redis-server >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null && apt-get install -y -qq redis-server >/dev/null; }
fi

if ! answers; then
    echo "==> starting redis-server on 127.0.0.1:${port}" >&2
    redis-server --bind 127.0.0.1 --port "$port" --daemonize yes --save '' --appendonly no \
        --dir /tmp --logfile "/tmp/countersign-test-redis-${port}.log" \
        --pidfile "/tmp/countersign-test-redis-${port}.pid" >/dev/null
    for _ in $(seq 1 50); do
        answers && break
        sleep 0.1
    done
    answers || { echo "redis-server did not answer on 127.0.0.1:${port}" >&2; exit 1; }
fi

export COUNTERSIGN_TEST_REDIS_URL="$url"
echo "export COUNTERSIGN_TEST_REDIS_URL=${url}"
