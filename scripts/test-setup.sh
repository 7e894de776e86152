#!/usr/bin/env bash
# What `make test` needs besides the Python virtualenv, set up on a fresh machine:
#   - python3 >= 3.11 with venv support;
#   - the system programs the tests run: redis-server (Redis tests, private servers for the
#     outage tests), nginx (the shipped deploy/nginx.conf in front of two gateways), chromium
#     (the demo-page browser test; Playwright drives the system browser, it downloads none) and
#     node >= 18 and npm (the JavaScript tests under clients/js, tests/node and the examples,
#     run by pytest, install their lock-file-pinned packages with npm ci);
#   - a Redis answering on 127.0.0.1:6379 (started here, in the background, if none answers);
#   - a local Redis Cluster on 127.0.0.1:7380-7385 (scripts/redis-cluster.sh start, idempotent);
#   - PostgreSQL for the archive tests: the server on 127.0.0.1:5432 when one answers, else
#     the postgresql package (the tests start a private server with its initdb and pg_ctl).
# Missing packages are installed with apt-get when this runs as root (or with password-less
# sudo); otherwise it stops at once with one line naming what to install.
set -euo pipefail

REDIS_HOST=127.0.0.1
REDIS_PORT=6379
REDIS_DIR="${TMPDIR:-/tmp}/agent-gateway-test-redis"

fail() {
  printf 'make test: %s\n' "$*" >&2
  exit 1
}

have() { command -v "$1" >/dev/null 2>&1; }

# nginx lives in /usr/sbin, which is not on every user's PATH.
have_nginx() { have nginx || [[ -x /usr/sbin/nginx ]]; }

# The archive tests use the PostgreSQL on 127.0.0.1:5432 when it answers, else they start a
# private server (initdb + pg_ctl, which Debian keeps in /usr/lib/postgresql/VERSION/bin).
postgres_up() { (exec 3<>"/dev/tcp/127.0.0.1/5432") 2>/dev/null; }
have_initdb() { have initdb || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; }

redis_up() {
  (exec 3<>"/dev/tcp/$REDIS_HOST/$REDIS_PORT" && printf 'PING\r\n' >&3 \
    && read -r -t 2 line <&3 && [[ "$line" == +PONG* ]]) 2>/dev/null
}

# --- Python -------------------------------------------------------------------------------
have python3 || fail "python3 (>= 3.11) is missing: install it (Debian/Ubuntu: apt-get install python3 python3-venv)."
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || fail "python3 >= 3.11 is required, found $(python3 -V 2>&1): install a newer Python 3."
python3 -c 'import ensurepip, venv' 2>/dev/null \
  || missing_python_venv=1

# --- system packages ----------------------------------------------------------------------
missing=()
[[ -n "${missing_python_venv:-}" ]] && missing+=(python3-venv)
have redis-server || missing+=(redis-server)
have_nginx || missing+=(nginx)
have chromium || missing+=(chromium)
have node || missing+=(nodejs)
# Debian packages npm apart from nodejs; the Node tests install their pinned packages with it.
have npm || missing+=(npm)
postgres_up || have_initdb || missing+=(postgresql)
# The container tests build and run the image with Podman (runc; aardvark-dns names the compose
# services), bring up docker-compose.yml with podman-compose and make the local base image with
# mmdebstrap, unless a working Docker engine is there.
if ! { have docker && docker info >/dev/null 2>&1; }; then
  for pkg in podman runc aardvark-dns podman-compose mmdebstrap; do
    case $pkg in
      aardvark-dns) [[ -x /usr/lib/podman/aardvark-dns ]] || missing+=("$pkg") ;;
      *) have "$pkg" || missing+=("$pkg") ;;
    esac
  done
fi

if ((${#missing[@]})); then
  if [[ "$(id -u)" == 0 ]]; then
    sudo=()
  elif have sudo && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    sudo=(none)
  fi
  if [[ "${sudo[0]:-}" == none ]] || ! have apt-get; then
    fail "not installed: ${missing[*]} (as root: apt-get install ${missing[*]}), then run make test again."
  fi
  echo "make test: installing ${missing[*]} with apt-get" >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
    && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      "${missing[@]}" >/dev/null \
    || fail "apt-get could not install ${missing[*]}: install them yourself and run make test again."
fi

node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 18 ? 1 : 0)' \
  || fail "node >= 18 is required, found $(node --version): install a newer Node.js."

# --- Redis on 127.0.0.1:6379 --------------------------------------------------------------
# Persistence as docker-compose.yml deploys it: an append-only file fsynced every second.
if ! redis_up; then
  mkdir -p "$REDIS_DIR"
  # A test server, loopback only, in a dir of its own; it keeps running after the tests.
  redis-server --daemonize yes --bind "$REDIS_HOST" --port "$REDIS_PORT" --save "" \
    --appendonly yes --appendfsync everysec \
    --dir "$REDIS_DIR" --logfile "$REDIS_DIR/redis.log" >/dev/null \
    || fail "redis-server did not start on $REDIS_HOST:$REDIS_PORT (see $REDIS_DIR/redis.log)."
  for _ in $(seq 1 50); do
    redis_up && break
    sleep 0.1
  done
  redis_up || fail "Redis does not answer on $REDIS_HOST:$REDIS_PORT (see $REDIS_DIR/redis.log)."
  echo "make test: started redis-server on $REDIS_HOST:$REDIS_PORT (it keeps running; stop it with: redis-cli -p $REDIS_PORT shutdown)" >&2
elif have redis-cli; then
  # A Redis found running: turn its append-only file on (CONFIG SET starts the AOF rewrite).
  for setting in "appendonly yes" "appendfsync everysec"; do
    # shellcheck disable=SC2086  # two words: the parameter and its value
    answer="$(redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" CONFIG SET $setting 2>&1)" || true
    [[ "$answer" == OK ]] \
      || fail "could not set $setting on the Redis at $REDIS_HOST:$REDIS_PORT: $answer"
  done
fi

# --- Redis Cluster on 127.0.0.1:7380-7385 -------------------------------------------------
# Three masters and three replicas (scripts/redis-cluster.sh), for the "redis-cluster" backend
# of the backend-parametrized tests; kept when it already answers with every slot served.
"$(dirname "$0")/redis-cluster.sh" start
