#!/usr/bin/env bash
# Builds the broker and operator images without any container registry, and smoke-tests them.
#
#   - the base image is Debian bookworm made with debootstrap (python3.11 + venv), cached and imported
#     as ferrymq-base:bookworm;
#   - if no Docker daemon answers on $DOCKER_HOST, a private dockerd is started for the duration
#     (its own socket and data root, --bridge=none: no 172.17.x bridge) and stopped by its PID;
#   - builds and containers use host networking only.
#
# Usage: scripts/build-images.sh [TAG]   (default TAG 0.1.0; needs root, docker.io and debootstrap)
#   FERRYMQ_IMAGES_CACHE  cache for the base rootfs and the private daemon (default ~/.cache/ferrymq-images)
set -euo pipefail

main() {
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)
TAG=${1:-0.1.0}
CACHE=${FERRYMQ_IMAGES_CACHE:-$HOME/.cache/ferrymq-images}
BASE=ferrymq-base:bookworm
log() { printf '[build-images] %s\n' "$*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap and dockerd)"
command -v dockerd >/dev/null || fail "dockerd not found: apt-get install docker.io"
command -v debootstrap >/dev/null || fail "debootstrap not found: apt-get install debootstrap"
# Debian's client matches Debian's daemon (API 1.41); a newer client elsewhere on PATH may not.
DOCKER=/usr/bin/docker
[ -x "$DOCKER" ] || DOCKER=$(command -v docker)
mkdir -p "$CACHE"

dockerd_pid=""
cleanup() {
  if [ -n "$dockerd_pid" ]; then
    kill "$dockerd_pid" 2>/dev/null || true
    wait "$dockerd_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

if ! "$DOCKER" info >/dev/null 2>&1; then
  export DOCKER_HOST="unix://$CACHE/docker.sock"
  log "starting a private dockerd on $DOCKER_HOST (log: $CACHE/dockerd.log)"
  dockerd --host "$DOCKER_HOST" --data-root "$CACHE/docker-data" --exec-root "$CACHE/docker-exec" \
    --pidfile "$CACHE/dockerd.pid" --bridge=none --iptables=false --ip6tables=false \
    --default-ulimit nofile=20000:20000 --default-ulimit nproc=4096:4096 \
    >"$CACHE/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 1 150); do
    "$DOCKER" info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || { tail -n 20 "$CACHE/dockerd.log" >&2; fail "dockerd exited"; }
    sleep 0.2
  done
  "$DOCKER" info >/dev/null 2>&1 || fail "dockerd did not answer within 30 s (log: $CACHE/dockerd.log)"
fi

# The local base trusts the host's CA bundle: where HTTPS to PyPI goes through an intercepting
# proxy, pip inside the build needs the same roots the host uses. Re-imported when the bundle changes.
HOST_CA=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
ca_sum=none
[ -f "$HOST_CA" ] && ca_sum=$(sha256sum "$HOST_CA" | cut -c1-16)
have_sum=$("$DOCKER" image inspect -f '{{ index .Config.Labels "org.ferrymq.base-ca" }}' "$BASE" 2>/dev/null || true)
if [ "$have_sum" != "$ca_sum" ]; then
  if [ ! -x "$CACHE/rootfs/usr/bin/python3" ]; then
    log "debootstrap bookworm into $CACHE/rootfs"
    rm -rf "$CACHE/rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
      bookworm "$CACHE/rootfs" http://deb.debian.org/debian >"$CACHE/debootstrap.log" 2>&1 \
      || fail "debootstrap (log: $CACHE/debootstrap.log)"
  fi
  rm -rf "$CACHE/rootfs/var/cache/apt/archives/"*.deb "$CACHE/rootfs/var/lib/apt/lists/"*
  changes=(--change "LABEL org.ferrymq.base-ca=$ca_sum")
  if [ -f "$HOST_CA" ]; then
    install -m 0644 "$HOST_CA" "$CACHE/rootfs/etc/ssl/certs/ca-certificates.crt"
    changes+=(--change "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt")
  fi
  log "importing $BASE"
  tar -C "$CACHE/rootfs" -c . | "$DOCKER" import "${changes[@]}" - "$BASE" >/dev/null \
    || fail "docker import"
fi

for image in broker operator; do
  case $image in
    broker) dockerfile=broker_image/Dockerfile name=ferrymq ;;
    operator) dockerfile=operator/Dockerfile name=ferrymq-operator ;;
  esac
  log "building $name:$TAG from $dockerfile"
  "$DOCKER" build --network=host --build-arg "BASE_IMAGE=$BASE" -f "$REPO_ROOT/$dockerfile" \
    -t "$name:$TAG" "$REPO_ROOT" || fail "docker build $dockerfile"
done

log "smoke tests (host network only)"
uid=$("$DOCKER" run --rm --network=host --entrypoint id ferrymq:"$TAG" -u)
[ "$uid" = 10001 ] || fail "broker image runs as uid $uid, expected 10001"
"$DOCKER" run --rm --network=host ferrymq:"$TAG" --help >/dev/null || fail "ferrymq --help in the image"
"$DOCKER" run --rm --network=host ferrymq-operator:"$TAG" --help >/dev/null \
  || fail "python -m ferrymq_operator --help in the image"
log "built ferrymq:$TAG and ferrymq-operator:$TAG"
"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^ferrymq(-operator)?:$TAG " >&2
}

# Same line: bash must not read further from this file (it may have been edited) after main returns.
main "$@"; exit $?
