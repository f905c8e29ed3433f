#!/usr/bin/env bash
# Make sure the services the tests talk to are up on 127.0.0.1, starting each one
# that is down, and that the machine has what the browser tests need.
set -euo pipefail

wait_for() {  # wait_for NAME COMMAND...
  local name=$1; shift
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then echo "ok: $name"; return 0; fi
    sleep 1
  done
  echo "error: $name did not come up" >&2
  return 1
}

if ! pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
fi
wait_for PostgreSQL pg_isready -h 127.0.0.1 -p 5432

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi
wait_for Redis redis-cli -h 127.0.0.1 -p 6379 ping

if ! rabbitmq-diagnostics -q check_port_connectivity >/dev/null 2>&1; then
  echo "starting RabbitMQ"
  rabbitmq-server -detached || true
fi
wait_for RabbitMQ rabbitmq-diagnostics -q check_port_connectivity
if ! rabbitmq-plugins list -e -m 2>/dev/null | grep -qx rabbitmq_management; then
  rabbitmq-plugins enable rabbitmq_management >/dev/null
fi
wait_for "RabbitMQ management API" curl -sf -u guest:guest http://127.0.0.1:15672/api/overview

if [ ! -x /usr/bin/chromium ]; then
  echo "installing Chromium for the browser tests"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
