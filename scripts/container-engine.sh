#!/usr/bin/env bash
# Sourced by the container scripts: picks the engine and prints nothing.
#   ENGINE   docker when a Docker daemon answers (`docker info`), else podman; CONTAINER_ENGINE
#            overrides.
# For Podman it writes a containers.conf (CONTAINERS_CONF, read by podman and podman-compose)
# that selects runc (crun refuses a hybrid cgroup layout) and sets the containers' nofile and
# nproc limits to the host's hard limits, read now: Podman's defaults may exceed them, and then
# no container starts. nproc is also capped at kernel.pid_max, above which this kernel refuses it.

container_engine() {
  if [[ -n "${CONTAINER_ENGINE:-}" ]]; then
    ENGINE=$CONTAINER_ENGINE
  elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    ENGINE=docker
  elif command -v podman >/dev/null 2>&1; then
    ENGINE=podman
  else
    echo "no container engine: install Docker or Podman (Debian: apt-get install podman runc)" >&2
    return 1
  fi
  if [[ "$ENGINE" == podman && -z "${CONTAINERS_CONF:-}" ]]; then
    local dir="${TMPDIR:-/tmp}/agent-gateway-podman-$(id -u)"
    mkdir -p "$dir"
    local nofile nproc
    nofile=$(ulimit -Hn)
    nproc=$(ulimit -Hu)
    [[ "$nofile" == unlimited ]] && nofile=1048576
    [[ "$nproc" == unlimited ]] && nproc=1048576
    local pid_max
    pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo "$nproc")
    ((nproc > pid_max)) && nproc=$pid_max
    local runtime=""
    command -v runc >/dev/null 2>&1 && runtime='runtime = "runc"'
    cat >"$dir/containers.conf.tmp" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
$runtime
CONF
    mv "$dir/containers.conf.tmp" "$dir/containers.conf"
    export CONTAINERS_CONF="$dir/containers.conf"
  fi
  export ENGINE
}

# PIP_MOUNTS: --volume options that mount, read-only and at the same paths, pip's configuration
# files here and the paths their values name (CA bundle, wheel folders, file:// indexes: the
# folder above .../simple, where the index's links point), so pip in a container reaches the
# package index as pip does on this machine.
pip_mounts() {
  local python=${PYTHON:-python3} path
  declare -A seen=()
  PIP_MOUNTS=()
  while IFS= read -r path; do
    [[ -e "$path" && -z "${seen[$path]:-}" ]] || continue
    seen[$path]=1
    PIP_MOUNTS+=(--volume "$path:$path:ro")
  done < <(
    "$python" -m pip config debug 2>/dev/null | sed -n 's/^ *\(\/[^,]*\), exists: True$/\1/p'
    "$python" -m pip config list 2>/dev/null | sed "s/^[^=]*='\(.*\)'$/\1/" | tr ' ' '\n' \
      | sed -n 's#^\(file://\)\{0,1\}\(/.*\)$#\2#p' | sed 's#/simple/\{0,1\}$##'
  )
}
