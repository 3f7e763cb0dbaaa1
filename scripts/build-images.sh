#!/usr/bin/env bash
# Builds the broker, operator and Spark images without any container registry, and smoke-tests them.
#
#   - names and tags come from `python -m ferrymq_operator.images` (the one place that names them;
#     the chart and the CRD defaults use the same module);
#   - the base image is Debian bookworm made with debootstrap (python3.11 + venv), cached and imported
#     as ferrymq-base:bookworm;
#   - the Docker daemon: $DOCKER_HOST if set; else the single-node cluster's dockerd
#     (scripts/k8s-node.sh up) when it answers, so its kubelet finds the images; else the default
#     daemon; else a private dockerd started for the duration (its own socket and data root,
#     --bridge=none: no 172.17.x bridge) and stopped by its PID;
#   - the Spark image installs PySpark from wheels built from the host's pip cache
#     (spark/k8s/wheels/, git-ignored): nothing is downloaded from PyPI inside that build;
#   - builds and containers use host networking only.
#
# Usage: scripts/build-images.sh [broker|operator|spark ...]   (default: all three; needs root,
#   docker.io and debootstrap)
#   FERRYMQ_IMAGES_CACHE  cache for the base rootfs and the private daemon (default ~/.cache/ferrymq-images)
#   FERRYMQ_K8S_CACHE     the node's cache (default ~/.cache/ferrymq-k8s; its dockerd socket is node/docker.sock)
#   FERRYMQ_IMAGES_SAVE   a directory: each built image is also written there as <broker|operator|spark>.tar
#                         (`docker save`; scripts/kind-cluster.sh load hands them to `kind load image-archive`)
set -euo pipefail

main() {
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${FERRYMQ_IMAGES_CACHE:-$HOME/.cache/ferrymq-images}
NODE_SOCK=${FERRYMQ_K8S_CACHE:-$HOME/.cache/ferrymq-k8s}/node/docker.sock
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

PY="$REPO_ROOT/.venv/bin/python"
[ -x "$PY" ] || PY=python3
names=$(PYTHONPATH="$REPO_ROOT/operator:$REPO_ROOT/broker_image" "$PY" -m ferrymq_operator.images) \
  || fail "python -m ferrymq_operator.images (run scripts/setup.sh first?)"
eval "$names"
# the gRPC proxy's generated stubs (ferrymq/proxy/v2, not committed) go into the images with the
# package tree: make sure they are there
"$REPO_ROOT/scripts/gen-proto.sh" || fail "scripts/gen-proto.sh (run scripts/setup.sh first?)"
: "${BROKER_IMAGE:?}" "${OPERATOR_IMAGE:?}" "${SPARK_IMAGE:?}"

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(broker operator spark)
for w in "${wanted[@]}"; do
  case $w in broker | operator | spark) ;; *) fail "unknown image '$w' (broker, operator or spark)" ;; esac
done

dockerd_pid=""
cleanup() {
  if [ -n "$dockerd_pid" ]; then
    kill "$dockerd_pid" 2>/dev/null || true
    wait "$dockerd_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

if [ -z "${DOCKER_HOST:-}" ] && [ -S "$NODE_SOCK" ] && "$DOCKER" -H "unix://$NODE_SOCK" info >/dev/null 2>&1; then
  export DOCKER_HOST="unix://$NODE_SOCK"
  log "using the single-node cluster's dockerd ($DOCKER_HOST)"
fi
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

for image in "${wanted[@]}"; do
  extra=()
  case $image in
    broker) dockerfile=broker_image/Dockerfile name=$BROKER_IMAGE ;;
    operator) dockerfile=operator/Dockerfile name=$OPERATOR_IMAGE ;;
    spark)
      dockerfile=spark/k8s/Dockerfile name=$SPARK_IMAGE
      # PySpark is an sdist of ~400 MB; the host's pip builds (or reuses) its wheel once, and the
      # image installs from these wheels only.
      log "collecting wheels for ferrymq[spark] into spark/k8s/wheels"
      "$PY" -m pip wheel -q -w "$REPO_ROOT/spark/k8s/wheels" -c "$REPO_ROOT/constraints.txt" \
        "$REPO_ROOT[spark]" "setuptools>=69" wheel \
        >"$CACHE/spark-wheels.log" 2>&1 || { tail -n 20 "$CACHE/spark-wheels.log" >&2; fail "pip wheel (log: $CACHE/spark-wheels.log)"; }
      # Only the dependencies: the image builds ferrymq itself from the copied sources.
      rm -f "$REPO_ROOT/spark/k8s/wheels/"ferrymq-*.whl
      extra=(--build-arg PIP_NO_INDEX=true)
      ;;
  esac
  log "building $name from $dockerfile"
  start=$(date +%s)
  "$DOCKER" build --network=host --build-arg "BASE_IMAGE=$BASE" "${extra[@]}" -f "$REPO_ROOT/$dockerfile" \
    -t "$name" "$REPO_ROOT" || fail "docker build $dockerfile"
  log "built $name in $(( $(date +%s) - start )) s"
done

log "smoke tests (host network only)"
for image in "${wanted[@]}"; do
  case $image in
    broker)
      uid=$("$DOCKER" run --rm --network=host --entrypoint id "$BROKER_IMAGE" -u)
      [ "$uid" = 10001 ] || fail "$BROKER_IMAGE runs as uid $uid, expected 10001"
      "$DOCKER" run --rm --network=host "$BROKER_IMAGE" --help >/dev/null || fail "ferrymq --help in $BROKER_IMAGE"
      ;;
    operator)
      "$DOCKER" run --rm --network=host "$OPERATOR_IMAGE" --help >/dev/null \
        || fail "kopf run --help in $OPERATOR_IMAGE"
      ;;
    spark)
      uid=$("$DOCKER" run --rm --network=host --entrypoint id "$SPARK_IMAGE" -u)
      [ "$uid" = 10001 ] || fail "$SPARK_IMAGE runs as uid $uid, expected 10001"
      "$DOCKER" run --rm --network=host "$SPARK_IMAGE" report --help >/dev/null \
        || fail "ferrymq report --help in $SPARK_IMAGE"
      "$DOCKER" run --rm --network=host --entrypoint java "$SPARK_IMAGE" -version >/dev/null 2>&1 \
        || fail "java -version in $SPARK_IMAGE"
      "$DOCKER" run --rm --network=host --entrypoint python "$SPARK_IMAGE" \
        -c "import pyspark, ferrymq_spark.session" || fail "import pyspark in $SPARK_IMAGE"
      ;;
  esac
done
if [ -n "${FERRYMQ_IMAGES_SAVE:-}" ]; then
  mkdir -p "$FERRYMQ_IMAGES_SAVE"
  for image in "${wanted[@]}"; do
    case $image in broker) name=$BROKER_IMAGE ;; operator) name=$OPERATOR_IMAGE ;; spark) name=$SPARK_IMAGE ;; esac
    "$DOCKER" save -o "$FERRYMQ_IMAGES_SAVE/$image.tar.tmp" "$name" || fail "docker save $name"
    mv "$FERRYMQ_IMAGES_SAVE/$image.tar.tmp" "$FERRYMQ_IMAGES_SAVE/$image.tar"
  done
  log "saved ${wanted[*]} to $FERRYMQ_IMAGES_SAVE"
fi
log "built ${wanted[*]}"
"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "^ferrymq/" >&2 || true
}

# Same line: bash must not read further from this file (it may have been edited) after main returns.
main "$@"; exit $?
