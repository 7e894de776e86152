#!/usr/bin/env bash
# A local Redis Cluster for the tests: three masters and three replicas on loopback ports
# (cluster-enabled, created with `redis-cli --cluster create ... --cluster-replicas 1`).
#
#   scripts/redis-cluster.sh start   # idempotent: a healthy cluster already there is kept
#   scripts/redis-cluster.sh stop    # shuts the six nodes down and removes their directory
#   scripts/redis-cluster.sh status  # exit 0 when the cluster answers with every slot served
#
# Ports: REDIS_CLUSTER_PORT (default 7380) and the five after it; the seed the tests use is
# redis://127.0.0.1:$REDIS_CLUSTER_PORT. Data (no persistence) and logs under
# REDIS_CLUSTER_DIR (default ${TMPDIR:-/tmp}/agent-gateway-test-redis-cluster).
set -euo pipefail

HOST=127.0.0.1
BASE="${REDIS_CLUSTER_PORT:-7380}"
DIR="${REDIS_CLUSTER_DIR:-${TMPDIR:-/tmp}/agent-gateway-test-redis-cluster}"
PORTS=()
for n in 0 1 2 3 4 5; do PORTS+=($((BASE + n))); done

fail() {
  printf 'redis-cluster: %s\n' "$*" >&2
  exit 1
}

ping() { redis-cli -h "$HOST" -p "$1" PING 2>/dev/null | grep -q PONG; }

healthy() {
  local info
  info="$(redis-cli -h "$HOST" -p "$BASE" CLUSTER INFO 2>/dev/null)" || return 1
  grep -q '^cluster_state:ok' <<<"$info" && grep -q '^cluster_slots_ok:16384' <<<"$info" \
    && grep -q '^cluster_known_nodes:6' <<<"$info"
}

start() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null \
    || fail "redis-server and redis-cli are needed (apt-get install redis-server)"
  if healthy; then
    return 0
  fi
  # Anything half made before (a node down, a cluster never created): start over.
  stop
  mkdir -p "$DIR"
  for port in "${PORTS[@]}"; do
    mkdir -p "$DIR/$port"
    redis-server --daemonize yes --bind "$HOST" --port "$port" --save "" --appendonly no \
      --cluster-enabled yes --cluster-config-file "$DIR/$port/nodes.conf" \
      --cluster-node-timeout 2000 --cluster-replica-validity-factor 0 --dir "$DIR/$port" --logfile "$DIR/$port/redis.log" \
      --pidfile "$DIR/$port/redis.pid" >/dev/null \
      || fail "redis-server did not start on $HOST:$port (see $DIR/$port/redis.log)"
  done
  for port in "${PORTS[@]}"; do
    for _ in $(seq 1 50); do
      ping "$port" && break
      sleep 0.1
    done
    ping "$port" || fail "no answer on $HOST:$port (see $DIR/$port/redis.log)"
  done
  local nodes=() info
  for port in "${PORTS[@]}"; do nodes+=("$HOST:$port"); done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$DIR/create.log" 2>&1 \
    || fail "redis-cli --cluster create failed (see $DIR/create.log)"
  for _ in $(seq 1 100); do
    healthy && break
    sleep 0.1
  done
  healthy || fail "the cluster on $HOST:$BASE is not ok (see $DIR/create.log)"
  # Every replica attached (a test kills a master and expects its replica to take over).
  for _ in $(seq 1 100); do
    [[ "$(redis-cli -h "$HOST" -p "$BASE" CLUSTER NODES | grep -c ' slave ')" == 3 ]] && break
    sleep 0.1
  done
  # ... and in sync with its master (a replica that never synced does not take over).
  for port in "${PORTS[@]}"; do
    for _ in $(seq 1 100); do
      info="$(redis-cli -h "$HOST" -p "$port" INFO replication 2>/dev/null)"
      grep -q '^role:master' <<<"$info" && break
      grep -q '^master_link_status:up' <<<"$info" && break
      sleep 0.1
    done
  done
  echo "redis-cluster: started on $HOST:${PORTS[0]}-${PORTS[5]} (stop it with: $0 stop)" >&2
}

stop() {
  for port in "${PORTS[@]}"; do
    # Only a node this script started (its pid file in our directory) is stopped.
    local pidfile="$DIR/$port/redis.pid"
    if [[ -f "$pidfile" ]]; then
      redis-cli -h "$HOST" -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
      local pid
      pid="$(cat "$pidfile" 2>/dev/null || true)"
      if [[ -n "$pid" ]]; then
        for _ in $(seq 1 50); do
          kill -0 "$pid" 2>/dev/null || break
          sleep 0.1
        done
        if grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
      fi
    fi
  done
  rm -rf "$DIR"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) healthy ;;
  *) fail "usage: $0 start|stop|status" ;;
esac
