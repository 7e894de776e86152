#!/usr/bin/env bash
# A local Python base image made from Debian packages, for engines that cannot pull the
# Dockerfile's default PYTHON_IMAGE (python:3.11-slim-bookworm) from a registry:
#   scripts/base-image.sh            -> prints the image name, e.g. localhost/agent-gateway-base:<hash>
#   make image                       (uses it when the default image is not present)
# Debian bookworm, minbase (priority required: dpkg, apt, passwd, ...) plus python3 (3.11),
# python3-venv, python-is-python3 (`python` on PATH) and ca-certificates; no compiler. Built once
# (a minute or a few), then reused while its recipe is unchanged.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/container-engine.sh
source "$here/container-engine.sh"
container_engine

SUITE=bookworm
PACKAGES=python3,python3-venv,python-is-python3,ca-certificates
# Documentation, man pages and translations are left out, as in the slim images.
args=(--quiet --variant=minbase --include="$PACKAGES"
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/lintian/*'
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*'
  "$SUITE")
# The tag is a hash of the recipe: the same recipe reuses the image built before.
hash=$(printf '%s\n' "${args[@]}" | sha256sum | cut -c1-12)
IMAGE="localhost/agent-gateway-base:$SUITE-$hash"

if "$ENGINE" image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "$IMAGE"
  exit 0
fi

command -v mmdebstrap >/dev/null 2>&1 \
  || { echo "base-image.sh: mmdebstrap is missing (Debian: apt-get install mmdebstrap)" >&2; exit 1; }

echo "base-image.sh: building $IMAGE from Debian $SUITE packages (mmdebstrap)" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mmdebstrap "${args[@]}" "$tmp/rootfs.tar" >&2
"$ENGINE" import --quiet \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  "$tmp/rootfs.tar" "$IMAGE" >/dev/null
echo "$IMAGE"
