#!/usr/bin/env bash
# `make image`: the gateway's image from the repository's Dockerfile, with Docker or Podman
# (whichever works here; CONTAINER_ENGINE=docker|podman picks one).
#   IMAGE         the tag (default agent-gateway:latest)
#   PYTHON_IMAGE  the Dockerfile's base; by default python:3.11-slim-bookworm when the engine
#                 already has it, else the local Debian base of scripts/base-image.sh (no
#                 container registry needed)
# With Podman the build mounts, read-only and at the same paths, what this machine's pip
# configuration names (its files, CA bundle, find-links and file:// indexes: `pip config list`),
# so pip inside the build reaches the package index as pip does here. The image keeps its
# HEALTHCHECK (Docker image format). Prints the image's tag.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
# shellcheck source=scripts/container-engine.sh
source "$here/container-engine.sh"
container_engine

IMAGE=${IMAGE:-agent-gateway:latest}
DEFAULT_BASE=python:3.11-slim-bookworm
if [[ -z "${PYTHON_IMAGE:-}" ]]; then
  if "$ENGINE" image inspect "$DEFAULT_BASE" >/dev/null 2>&1; then
    PYTHON_IMAGE=$DEFAULT_BASE
  else
    PYTHON_IMAGE=$("$here/base-image.sh")
  fi
fi

# Also tagged with the project's version (the Kubernetes manifests name agent-gateway:<version>).
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/pyproject.toml")
args=(build --tag "$IMAGE" --tag "${IMAGE%:*}:$version" --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" --network host)
if [[ "$ENGINE" == podman ]]; then
  args+=(--format docker --layers)
  pip_mounts
  args+=("${PIP_MOUNTS[@]}")
fi

echo "image.sh: $ENGINE building $IMAGE (PYTHON_IMAGE=$PYTHON_IMAGE)" >&2
"$ENGINE" "${args[@]}" "$root" >&2
echo "$IMAGE"
