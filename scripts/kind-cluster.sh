#!/usr/bin/env bash
# A 3-node kind cluster (1 control plane + 2 workers) of Kubernetes 1.34 with a pod network, built
# and run on this machine without any container registry, inside a network namespace of its own.
#
#   - kind, Kubernetes (kubeadm, kubelet, kubectl, kube-apiserver, -controller-manager, -scheduler,
#     kube-proxy), etcd, CoreDNS and local-path-provisioner are built from the Go module proxy
#     (Kubernetes through a wrapper module: `go install k8s.io/kubernetes/...` refuses its replaces);
#   - the node image starts from a debootstrap bookworm rootfs with Debian's containerd, runc and
#     CNI plugins, plus kind's images/base/files taken from the kind module at build time and
#     patched for this sandbox (no CAP_SYS_RESOURCE: RLIMIT limits, runc-clamp; negative OOM
#     scores refused: restrict_oom_score_adj); every control-plane image is built locally and
#     preloaded like `kind build node-image` does; scripts/kind/default-cni.yaml replaces kindnetd;
#   - a private dockerd runs in network namespace $NS (nsenter --net: `ip netns exec` would hide
#     /sys/fs/cgroup); kind's docker network, the nodes, pods and Services exist only in there.
#     The netns routes each node's podCIDR to that node, so a process in the netns reaches pods;
#   - the kubelet rewrites VM-wide sysctls (vm.overcommit_memory, kernel.panic, ...): `up` records
#     them before the first node starts, `down` writes them back and shows any difference.
#
# Usage: scripts/kind-cluster.sh up|down|env|status|build|control-plane|load|exec CMD...
#   build   build what is missing (cached under $FERRYMQ_KIND_CACHE/<versions>); no cluster
#   control-plane  build only kube-apiserver, kube-controller-manager and etcd (what an
#           API-server test needs; no root, no docker), into the same cache; prints the binaries
#   up      build, start dockerd in the netns, create the cluster if absent, wait until all nodes
#           are Ready, route the podCIDRs; idempotent; prints the time of every step
#   down    delete the cluster, stop dockerd by its PID, unmount, delete the netns, restore sysctls
#   env     shell assignments: DOCKER_HOST, KUBECONFIG, E2E_* and PATH (kind, kubectl, helm)
#   load    load broker|operator|spark...: scripts/build-images.sh outside the netns (pip and
#           debootstrap need the network), then `kind load image-archive` into every node
#   exec    run CMD in the netns with that environment (kubectl, pytest e2e, ...)
#   status  what runs, and where
#   FERRYMQ_KIND_CACHE  cache root (default ~/.cache/ferrymq-kind)
#   FERRYMQ_KIND_NS     network namespace (default ferrymq-kind)
#   FERRYMQ_KIND_WORKERS  number of workers (default 2)
#   FERRYMQ_KIND_CPU_SHARES  cpu.shares of the cluster's cgroup /docker (default 1024 per CPU)
set -euo pipefail

KIND_VERSION=v0.33.0
K8S_VERSION=v1.34.4
ETCD_VERSION=v3.6.5
COREDNS_VERSION=v1.14.7
LPP_VERSION=v0.0.30
HELM_VERSION=v3.18.6   # only when scripts/k8s-control-plane.sh has not provisioned one
DEBIAN_SUITE=bookworm
# What kubeadm v1.34.4 asks for (`kubeadm config images list`); built from the versions above.
ETCD_TAG=3.6.5-0
COREDNS_TAG=v1.12.1
PAUSE_TAG=3.10.1
# The oldest Go that builds Kubernetes 1.34; an older one on PATH is replaced by this toolchain
# from the module proxy (golang.org/toolchain).
GO_MIN=1.24
GO_TOOLCHAIN=go1.24.11

main() {
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROOT=${FERRYMQ_KIND_CACHE:-$HOME/.cache/ferrymq-kind}
K="$ROOT/k8s-$K8S_VERSION-kind-$KIND_VERSION-etcd-$ETCD_VERSION-coredns-$COREDNS_VERSION-lpp-$LPP_VERSION-$DEBIAN_SUITE"
BIN="$K/bin"
RUN="$ROOT/run"       # per machine, not per version: the netns, dockerd, saved sysctls
LOGS="$ROOT/logs"
NS=${FERRYMQ_KIND_NS:-ferrymq-kind}
NAME=${E2E_KIND_CLUSTER:-ferrymq-e2e}
WORKERS=${FERRYMQ_KIND_WORKERS:-2}
# The node images are tagged by a digest of what goes into them besides the cached binaries (this
# script's patches, scripts/kind, runc-clamp): an edit rebuilds them (about a minute), never reuses.
INPUTS=$(cat "$0" "$REPO_ROOT/scripts/k8s-node/runc-clamp" "$REPO_ROOT"/scripts/kind/*.* \
  "$REPO_ROOT"/scripts/kind/images/* 2>/dev/null | sha256sum | cut -c1-10)
NODE_BASE_IMAGE=ferrymq.local/kind-node-base:$DEBIAN_SUITE-$INPUTS
NODE_IMAGE=ferrymq.local/kind-node:$K8S_VERSION-$INPUTS
BASE_IMAGE=ferrymq.local/kind-base:$DEBIAN_SUITE
SOCK="$RUN/docker.sock"
DOCKER=/usr/bin/docker
KUBECONFIG_FILE="$RUN/kubeconfig"
SHARED="$ROOT/shared"
APT_PACKAGES=(docker.io iptables debootstrap jq gcc libc6-dev curl unzip)
# Kernel parameters the kubelet sets for the whole VM (kubelet's setupKernelTunables) and
# kube-proxy's conntrack table size: recorded before `up`, restored by `down`.
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
  kernel/keys/root_maxkeys kernel/keys/root_maxbytes net/netfilter/nf_conntrack_max)
step=init
reported=0
trap 'rc=$?; if [ $rc -ne 0 ] && [ $reported = 0 ]; then log "FAILED at step $step (exit $rc); see above"; fi' EXIT

case ${1:-} in
  build) need_root; lock; build_all ;;
  control-plane) lock; build_control_plane ;;
  up) need_root; lock; up ;;
  down) need_root; lock; down ;;
  env) print_env ;;
  exec) shift; need_root; reported=1; in_ns exec "$@" ;;
  load) shift; need_root; lock; load_images "$@" ;;
  status) status ;;
  *) reported=1; log "usage: $0 up|down|env|status|build|control-plane|load|exec CMD..."; exit 2 ;;
esac
}

log() { printf '[kind-cluster %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
fail() { reported=1; log "FAILED at step '$step': $*"; exit 1; }
need_root() { [ "$(id -u)" -eq 0 ] || fail "needs root (netns, dockerd, debootstrap)"; }
lock() {  # one build/up/down/load at a time on this machine (they share the netns and dockerd)
  mkdir -p "$ROOT"
  exec 9>"$ROOT/.lock"
  flock -n 9 || { log "another kind-cluster.sh holds $ROOT/.lock; waiting"; flock 9; }
}

T0=$(date +%s)
timed() {  # timed NAME CMD... : runs CMD, logs its wall time
  local name=$1 s
  shift
  step=$name
  s=$(date +%s)
  "$@"
  log "$name: $(( $(date +%s) - s )) s (total $(( $(date +%s) - T0 )) s)"
}

dk() { "$DOCKER" -H "unix://$SOCK" "$@"; }
in_ns() {  # in_ns [exec] CMD... : CMD in the netns with the cluster's environment
  [ -e "/run/netns/$NS" ] || fail "no netns $NS: run $0 up first"
  local replace=""
  if [ "$1" = exec ]; then replace=exec; shift; fi
  $replace nsenter --net="/run/netns/$NS" env DOCKER_HOST="unix://$SOCK" KUBECONFIG="$KUBECONFIG_FILE" \
    E2E_KUBECONFIG="$KUBECONFIG_FILE" E2E_CONTEXT="kind-$NAME" E2E_KIND_CLUSTER="$NAME" \
    E2E_KIND_NETNS="$NS" E2E_KIND_SHARED="$SHARED" FERRYMQ_KIND_CACHE="$ROOT" PATH="$BIN:$(helm_dir)$PATH" "$@"
}
helm_dir() {  # the helm that scripts/k8s-control-plane.sh provisions, when there is one
  local d=${FERRYMQ_K8S_CACHE:-$HOME/.cache/ferrymq-k8s}/bin
  [ -x "$d/helm" ] && echo "$d:"
  return 0
}
outside() {  # run in the network namespace `up` was started from (the host's)
  if [ -e "$RUN/outside.netns" ]; then nsenter --net="$RUN/outside.netns" "$@"; else "$@"; fi
}

load_images() {
  [ $# -gt 0 ] || set -- broker operator
  local out="$RUN/images" i s
  mkdir -p "$out"
  s=$(date +%s)
  step=build-images
  outside env -u DOCKER_HOST -u KUBECONFIG FERRYMQ_IMAGES_SAVE="$out" "$REPO_ROOT/scripts/build-images.sh" "$@" \
    || fail "scripts/build-images.sh $*"
  log "build-images $*: $(( $(date +%s) - s )) s"
  for i in "$@"; do
    s=$(date +%s)
    step="kind load $i"
    in_ns "$BIN/kind" load image-archive "$out/$i.tar" --name "$NAME" || fail "kind load image-archive $i"
    log "kind load $i: $(( $(date +%s) - s )) s"
  done
}

print_env() {
  cat <<ENV
export FERRYMQ_KIND_CACHE=$ROOT
export DOCKER_HOST=unix://$SOCK
export KUBECONFIG=$KUBECONFIG_FILE
export E2E_KUBECONFIG=$KUBECONFIG_FILE
export E2E_CONTEXT=kind-$NAME
export E2E_KIND_CLUSTER=$NAME
export E2E_KIND_NETNS=$NS
export E2E_KIND_SHARED=$SHARED
export PATH=$BIN:$(helm_dir)\$PATH
# kubectl, kind and anything that talks to the pods run inside the netns:
#   scripts/kind-cluster.sh exec kubectl get nodes
ENV
}

# ------------------------------------------------------------------ tools
apt_tools() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || fail "apt-get update"
  # No init system here; RUNLEVEL=1 keeps maintainer scripts from starting daemons.
  RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || fail "apt-get install ${missing[*]}"
}

go_ok() {  # go_ok GO : its version is at least GO_MIN
  local v
  v=$("$1" env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  [ "$(printf '%s\n%s\n' "$GO_MIN" "$v" | sort -V | head -1)" = "$GO_MIN" ]
}

find_go() {  # sets GO to a Go >= GO_MIN: on PATH, /usr/local/go, or the toolchain module
  local c
  for c in "$(command -v go || true)" /usr/local/go/bin/go "$ROOT/go/bin/go"; do
    if [ -n "$c" ] && [ -x "$c" ] && go_ok "$c"; then GO=$c; return 0; fi
  done
  log "no Go >= $GO_MIN: fetching $GO_TOOLCHAIN from the Go module proxy (golang.org/toolchain)"
  local zip="$ROOT/go-toolchain.zip" tmp="$ROOT/go.tmp"
  curl -fsSL -o "$zip" \
    "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$GO_TOOLCHAIN.linux-amd64.zip" \
    || fail "download of $GO_TOOLCHAIN from proxy.golang.org"
  rm -rf "$tmp" && mkdir -p "$tmp" && unzip -q "$zip" -d "$tmp" || fail "unzip $zip"
  rm -rf "$ROOT/go" && mv "$tmp/golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-amd64" "$ROOT/go"
  rm -rf "$tmp" "$zip"
  chmod +x "$ROOT/go/bin/"* "$ROOT/go/pkg/tool/"*/* 2>/dev/null || true
  GO="$ROOT/go/bin/go"
  go_ok "$GO" || fail "$GO does not run"
}

gorun() {  # the Go builds: low priority (the machine is shared), proxy only, our toolchain
  env GOTOOLCHAIN=local GOPROXY=https://proxy.golang.org GOFLAGS=-mod=mod CGO_ENABLED=0 \
    nice -n "${FERRYMQ_KIND_NICE:-10}" "$GO" "$@"
}

modcache() { gorun env GOMODCACHE; }

# ------------------------------------------------------------------ binaries
build_kind() {
  [ -x "$BIN/kind" ] && return 0
  GOBIN="$BIN" gorun install "sigs.k8s.io/kind@$KIND_VERSION" || fail "go install kind"
}

build_kubernetes() {  # build_kubernetes [CMD...] : those of k8s.io/kubernetes/cmd (default: all kind needs)
  local cmds=("$@")
  [ ${#cmds[@]} -gt 0 ] || cmds=(kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
  local c missing=0
  for c in "${cmds[@]}"; do [ -x "$BIN/$c" ] || missing=1; done
  [ $missing = 0 ] && return 0
  local w="$K/src/kbuild" minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  mkdir -p "$w"
  # The wrapper module: k8s.io/kubernetes' go.mod maps its staging modules to ./staging, which the
  # module zip lacks; each gets the published k8s.io/<name> v0.<minor>.<patch> instead.
  printf 'module kbuild\n\ngo %s.0\n\ngodebug default=go%s\n\nrequire k8s.io/kubernetes %s\n' \
    "$GO_MIN" "$GO_MIN" "$K8S_VERSION" >"$w/go.mod"
  (cd "$w" && gorun mod download k8s.io/kubernetes) || fail "download k8s.io/kubernetes@$K8S_VERSION"
  local kmod
  kmod="$(modcache)/k8s.io/kubernetes@$K8S_VERSION"
  {
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 v0.'"${K8S_VERSION#v1.}"'#p' "$kmod/go.mod"
    echo ")"
  } >>"$w/go.mod"
  grep -q '=> k8s.io/api v0' "$w/go.mod" || fail "no staging replaces found in $kmod/go.mod"
  # Without these the binaries say v0.0.0 and kubeadm refuses the version.
  local ld="-s -w" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld="$ld -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.gitTreeState=clean"
    ld="$ld -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  local pk=()
  for c in "${cmds[@]}"; do pk+=("k8s.io/kubernetes/cmd/$c"); done
  mkdir -p "$BIN"
  # One `go build` for all of them: they share most packages.
  (cd "$w" && gorun build -trimpath -ldflags "$ld" -o "$BIN/" "${pk[@]}") \
    || fail "go build of Kubernetes $K8S_VERSION"
  "$BIN/kube-apiserver" --version | grep -qx "Kubernetes $K8S_VERSION" \
    || fail "kube-apiserver reports $("$BIN/kube-apiserver" --version)"
}

build_etcd() {
  [ -x "$BIN/etcd" ] && return 0
  local w="$K/src/etcdbuild" m
  mkdir -p "$w"
  # go.etcd.io/etcd/server/v3 maps its sibling modules to ../api etc.: the same kind of wrapper.
  {
    printf 'module etcdbuild\n\ngo %s.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n\nreplace (\n' "$GO_MIN" "$ETCD_VERSION"
    for m in api/v3 client/pkg/v3 client/v3 pkg/v3; do
      printf '\tgo.etcd.io/etcd/%s => go.etcd.io/etcd/%s %s\n' "$m" "$m" "$ETCD_VERSION"
    done
    printf ')\n'
  } >"$w/go.mod"
  (cd "$w" && gorun build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3) \
    || fail "go build etcd $ETCD_VERSION"
}

build_coredns() {
  [ -x "$BIN/coredns" ] && return 0
  GOBIN="$BIN" gorun install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION" \
    || fail "go install coredns $COREDNS_VERSION"
}

build_lpp() {
  [ -x "$BIN/local-path-provisioner" ] && return 0
  GOBIN="$BIN" gorun install -trimpath -ldflags "-s -w" \
    "github.com/rancher/local-path-provisioner@$LPP_VERSION" || fail "go install local-path-provisioner"
}

build_helm() {  # the e2e suite installs the operator with helm
  [ -x "$BIN/helm" ] || [ -n "$(helm_dir)" ] && return 0
  GOBIN="$BIN" gorun install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
    || fail "go install helm $HELM_VERSION"
}

build_pause() {
  [ -x "$BIN/pause" ] && return 0
  local src
  src="$(modcache)/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c"
  [ -f "$src" ] || fail "$src missing"
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_TAG" -o "$BIN/pause" "$src" || fail "gcc -static pause.c"
}

# ------------------------------------------------------------------ netns + dockerd
dockerd_pid() {  # the PID of our dockerd, or nothing
  local pid
  [ -f "$RUN/dockerd.pid" ] || return 0
  pid=$(cat "$RUN/dockerd.pid")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null \
      && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "dockerd.*$SOCK"; then
    echo "$pid"
  fi
}

save_sysctls() {
  # Once per up/down cycle: a second `up` must not record the kubelet's values as the originals.
  [ -f "$RUN/sysctl.saved" ] && return 0
  local f
  for f in "${SYSCTLS[@]}"; do
    [ -r "/proc/sys/$f" ] && echo "$f $(cat "/proc/sys/$f")"
  done >"$RUN/sysctl.saved.tmp"
  mv "$RUN/sysctl.saved.tmp" "$RUN/sysctl.saved"
  sysctl_snapshot >"$RUN/sysctl.before"
  [ -e /lib/modules ] || touch "$RUN/created-lib-modules"
}

sysctl_snapshot() {  # every kernel parameter that does not change by itself
  sysctl -a 2>/dev/null | grep -Ev '^(fs\.(dentry-state|inode-nr|inode-state|file-nr|quota)|kernel\.(random|ns_last_pid|pty\.nr|sched_domain)|net\.netfilter\.nf_conntrack_count|vm\.(stat_refresh|drop_caches))' | sort
}

start_dockerd() {
  mkdir -p "$RUN" "$LOGS" "$K/docker"
  save_sysctls
  if [ ! -e "/run/netns/$NS" ]; then
    ip netns add "$NS" || fail "ip netns add $NS"
    ip -n "$NS" link set lo up
  fi
  # A handle on the namespace we came from: `load` builds images out there (they need the network)
  # even when called from inside the netns (the e2e suite runs in there).
  if [ ! -e "$RUN/outside.netns" ] && [ "$(readlink /proc/self/ns/net)" != "$(nsenter --net="/run/netns/$NS" readlink /proc/self/ns/net)" ]; then
    touch "$RUN/outside.netns" && mount --bind /proc/self/ns/net "$RUN/outside.netns" \
      || fail "bind mount of this network namespace"
  fi
  [ -n "$(dockerd_pid)" ] && dk info >/dev/null 2>&1 && return 0
  install -m 0755 "$REPO_ROOT/scripts/k8s-node/runc-clamp" "$RUN/runc-clamp"
  log "starting dockerd in netns $NS (log: $LOGS/dockerd.log)"
  # nsenter --net keeps the host's mount namespace (ip netns exec remounts /sys, hiding cgroups).
  # The default bridge (172.17/16) and kind's network exist only inside the netns.
  setsid nsenter --net="/run/netns/$NS" nice -n 10 /usr/sbin/dockerd -H "unix://$SOCK" \
    --data-root "$K/docker" --exec-root "$RUN/dexec" --pidfile "$RUN/dexec/dockerd.pid" \
    --oom-score-adjust=0 --default-ulimit nofile=20000:20000 --default-ulimit nproc=65536:65536 \
    --add-runtime "clamp=$RUN/runc-clamp" --default-runtime=clamp \
    --exec-opt native.cgroupdriver=cgroupfs --storage-driver=overlay2 \
    </dev/null >>"$LOGS/dockerd.log" 2>&1 9>&- &
  echo $! >"$RUN/dockerd.pid"
  local i
  for i in $(seq 1 120); do
    dk info >/dev/null 2>&1 && return 0
    [ -n "$(dockerd_pid)" ] || { tail -n 20 "$LOGS/dockerd.log" >&2; fail "dockerd exited"; }
    sleep 0.5
  done
  fail "dockerd did not answer within 60 s (log: $LOGS/dockerd.log)"
}

# ------------------------------------------------------------------ images
ROOTFS_PID=""
rootfs_ok() {  # containerd, and the python3 stdlib runc-clamp imports (json is not in python3-minimal)
  [ -x "$K/rootfs/usr/bin/containerd" ] && compgen -G "$K/rootfs/usr/lib/python3*/json/__init__.py" >/dev/null
}

rootfs_start() {  # debootstrap (mostly downloads) in the background while Go compiles
  rootfs_ok && return 0
  local rootfs="$K/rootfs"
  rm -rf "$rootfs.tmp"
  log "debootstrap $DEBIAN_SUITE in the background (log: $LOGS/debootstrap.log)"
  # python3 (not python3-minimal, which lacks json): the node's containerd runs every pod through
  # scripts/k8s-node/runc-clamp.
  (
    s=$(date +%s)
    nice -n 10 debootstrap --variant=minbase --include=systemd,systemd-sysv,conntrack,iptables,nftables,\
iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,curl,jq,\
procps,containerd,runc,containernetworking-plugins,socat,ebtables,python3 \
      "$DEBIAN_SUITE" "$rootfs.tmp" http://deb.debian.org/debian >"$LOGS/debootstrap.log" 2>&1 || exit 1
    rm -rf "$rootfs.tmp/var/cache/apt/archives/"*.deb "$rootfs.tmp/var/lib/apt/lists/"*
    mv "$rootfs.tmp" "$rootfs"
    log "debootstrap (background): $(( $(date +%s) - s )) s"
  ) &
  ROOTFS_PID=$!
}

build_base() {
  if [ -n "$ROOTFS_PID" ]; then
    wait "$ROOTFS_PID" || { tail -n 20 "$LOGS/debootstrap.log" >&2; fail "debootstrap (log: $LOGS/debootstrap.log)"; }
    ROOTFS_PID=""
  fi
  # An image imported from an older rootfs (python3-minimal: runc-clamp exits 1 on `import json`,
  # every pod sandbox fails) is imported again.
  dk image inspect "$BASE_IMAGE" >/dev/null 2>&1 \
    && dk run --rm --network none --entrypoint python3 "$BASE_IMAGE" -c 'import json' >/dev/null 2>&1 \
    && return 0
  rootfs_ok || fail "no complete rootfs at $K/rootfs (containerd and python3 with json)"
  tar -C "$K/rootfs" -c . | dk import -c 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null || fail "docker import"
  dk tag "$BASE_IMAGE" ferrymq-kind/base:bookworm
}

node_base() {  # kind's images/base/files, patched, on top of the debootstrap base
  dk image inspect "$NODE_BASE_IMAGE" >/dev/null 2>&1 && return 0
  local kmod ctx="$K/src/node-base" f
  kmod="$(modcache)/sigs.k8s.io/kind@$KIND_VERSION"
  [ -d "$kmod/images/base/files" ] || fail "$kmod/images/base/files missing"
  rm -rf "$ctx" && mkdir -p "$ctx/files/usr/local/sbin"
  cp -r "$kmod/images/base/files/." "$ctx/files/"
  chmod -R u+w "$ctx"
  f="$ctx/files/etc/systemd/system/containerd.service"
  # Debian's containerd; no CAP_SYS_RESOURCE here, so no limit above the hard ones we have.
  sed -i -e 's#^ExecStart=/usr/local/bin/containerd#ExecStart=/usr/bin/containerd#' \
    -e 's#^LimitNOFILE=infinity#LimitNOFILE=20000#' -e 's#^LimitNPROC=infinity#LimitNPROC=65536#' \
    -e 's#^LimitCORE=infinity#LimitCORE=0#' "$f"
  grep -q '^ExecStart=/usr/bin/containerd$' "$f" || fail "patching $f"
  rm -f "$ctx/files/etc/systemd/system/containerd-fuse-overlayfs.service"
  f="$ctx/files/etc/containerd/config.toml"
  # containerd 1.6: no fuse-overlayfs proxy; CRI clamps negative OOM scores (refused here) to
  # its own; the sandbox image kubeadm 1.34 expects; pods through runc-clamp (capabilities).
  sed -i -e '/^\[proxy_plugins\]/,/^$/d' \
    -e 's#restrict_oom_score_adj = false#restrict_oom_score_adj = true#' \
    -e "s#sandbox_image = \"registry.k8s.io/pause:[^\"]*\"#sandbox_image = \"registry.k8s.io/pause:$PAUSE_TAG\"#" \
    -e 's#^\(\s*\)SystemdCgroup = true#\1SystemdCgroup = true\n\1BinaryName = "/usr/local/sbin/runc-clamp"#' "$f"
  grep -q 'restrict_oom_score_adj = true' "$f" && grep -q BinaryName "$f" \
    && ! grep -q proxy_plugins "$f" || fail "patching $f"
  install -m 0755 "$REPO_ROOT/scripts/k8s-node/runc-clamp" "$ctx/files/usr/local/sbin/runc-clamp"
  cp "$REPO_ROOT/scripts/kind/node.Dockerfile" "$ctx/Dockerfile"
  DOCKER_BUILDKIT=0 dk build -q -t "$NODE_BASE_IMAGE" "$ctx" >/dev/null \
    || fail "docker build of the node base"
}

storage_manifest() {  # kind's default StorageClass manifest (a Go constant) with our images
  local kmod
  kmod="$(modcache)/sigs.k8s.io/kind@$KIND_VERSION"
  awk '/^const defaultStorageManifest = `/{on=1; next} on && /^`/{exit} on' \
    "$kmod/pkg/build/nodeimage/const_storage.go" \
    | sed -e 's#` + storageProvisionerImage + `#ferrymq.local/local-path-provisioner:'"$LPP_VERSION"'#' \
      -e 's#` + storageHelperImage + `#'"$BASE_IMAGE"'#'
}

node_image() {
  dk image inspect "$NODE_IMAGE" >/dev/null 2>&1 && return 0
  local work c cid
  work=$(mktemp -d "$K/node-image.XXXXXX")
  B() { DOCKER_BUILDKIT=0 dk build -q "$@" >/dev/null; }
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    mkdir -p "$work/$c" && cp "$REPO_ROOT/scripts/kind/images/kube.Dockerfile" "$work/$c/Dockerfile"
    cp "$BIN/$c" "$work/$c/"
    B --build-arg BIN=$c -t "registry.k8s.io/$c:$K8S_VERSION" "$work/$c" || fail "image $c"
  done
  mkdir -p "$work/kp" && cp "$REPO_ROOT/scripts/kind/images/kube-proxy.Dockerfile" "$work/kp/Dockerfile"
  cp "$REPO_ROOT/scripts/kind/images/kube-proxy-wrapper" "$BIN/kube-proxy" "$work/kp/"
  B -t "registry.k8s.io/kube-proxy:$K8S_VERSION" "$work/kp" || fail "image kube-proxy"
  local one
  for one in etcd:etcd:registry.k8s.io/etcd:$ETCD_TAG coredns:coredns:registry.k8s.io/coredns/coredns:$COREDNS_TAG \
      pause:pause:registry.k8s.io/pause:$PAUSE_TAG \
      local-path-provisioner:local-path-provisioner:ferrymq.local/local-path-provisioner:$LPP_VERSION; do
    local df=${one%%:*} rest=${one#*:}
    local bin=${rest%%:*} tag=${rest#*:}
    mkdir -p "$work/$df" && cp "$REPO_ROOT/scripts/kind/images/$df.Dockerfile" "$work/$df/Dockerfile"
    cp "$BIN/$bin" "$work/$df/"
    B -t "$tag" "$work/$df" || fail "image $tag"
  done
  local imgs=("registry.k8s.io/kube-apiserver:$K8S_VERSION" "registry.k8s.io/kube-controller-manager:$K8S_VERSION"
    "registry.k8s.io/kube-scheduler:$K8S_VERSION" "registry.k8s.io/kube-proxy:$K8S_VERSION"
    "registry.k8s.io/etcd:$ETCD_TAG" "registry.k8s.io/coredns/coredns:$COREDNS_TAG"
    "registry.k8s.io/pause:$PAUSE_TAG" "$BASE_IMAGE" "ferrymq.local/local-path-provisioner:$LPP_VERSION")
  dk save -o "$work/images.tar" "${imgs[@]}" || fail "docker save"
  # What kind's `build node-image` adds to the base: binaries, version, default manifests.
  mkdir -p "$work/node/manifests"
  cp "$BIN/kubeadm" "$BIN/kubelet" "$BIN/kubectl" "$work/node/"
  cp "$REPO_ROOT/scripts/kind/default-cni.yaml" "$work/node/manifests/default-cni.yaml"
  storage_manifest >"$work/node/manifests/default-storage.yaml"
  grep -q "ferrymq.local/local-path-provisioner" "$work/node/manifests/default-storage.yaml" \
    || fail "kind's storage manifest not found in the kind module"
  cat >"$work/node/Dockerfile" <<DF
FROM $NODE_BASE_IMAGE
COPY kubeadm kubelet kubectl /usr/bin/
COPY manifests/ /kind/manifests/
RUN echo $K8S_VERSION > /kind/version
DF
  B -t "ferrymq.local/kind-node-stage:$K8S_VERSION" "$work/node" || fail "node stage image"
  # Preload like kind's node image builder: containerd in a sleeping container, import without
  # unpacking, pin, commit with the entrypoint put back.
  cid=$(dk run -d --entrypoint=sleep --security-opt seccomp=unconfined \
    "ferrymq.local/kind-node-stage:$K8S_VERSION" infinity) || fail "docker run of the node stage"
  dk exec "$cid" bash -c 'nohup containerd >/dev/null 2>&1 &'
  dk exec "$cid" bash -c 'for i in $(seq 1 60); do ctr version >/dev/null 2>&1 && exit 0; sleep 1; done; exit 1' \
    || fail "containerd in the node stage"
  dk exec -i "$cid" ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests - \
    <"$work/images.tar" >/dev/null || fail "ctr images import"
  local i
  for i in "${imgs[@]}"; do
    # docker save writes short names as docker.io/...; kubeadm asks for registry.k8s.io/... names
    case $i in registry.k8s.io/*|ferrymq.local/*) ;; *) i=docker.io/$i ;; esac
    dk exec "$cid" ctr --namespace=k8s.io images label "$i" io.cri-containerd.pinned=pinned >/dev/null \
      || fail "ctr images label $i"
  done
  dk exec "$cid" pkill containerd || true
  dk exec "$cid" bash -c 'for i in $(seq 1 30); do pgrep -x containerd >/dev/null || exit 0; sleep 0.5; done'
  dk commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' "$cid" "$NODE_IMAGE" >/dev/null \
    || fail "docker commit"
  dk rm -f "$cid" >/dev/null
  dk rmi "ferrymq.local/kind-node-stage:$K8S_VERSION" >/dev/null 2>&1 || true
  rm -rf "$work"
  # node images of earlier inputs (about 1.6 GB each)
  local old
  for old in $(dk images --format '{{.Repository}}:{{.Tag}}' | grep -E '^ferrymq.local/kind-node(-base)?:' \
      | grep -vx -e "$NODE_IMAGE" -e "$NODE_BASE_IMAGE"); do
    dk rmi "$old" >/dev/null 2>&1 || true
  done
}

build_all() {
  mkdir -p "$BIN" "$RUN" "$LOGS"
  timed apt apt_tools
  [ -n "$(dockerd_pid)" ] && dk image inspect "$BASE_IMAGE" >/dev/null 2>&1 || rootfs_start
  find_go
  timed kind build_kind
  timed kubernetes build_kubernetes
  timed etcd build_etcd
  timed coredns build_coredns
  timed local-path-provisioner build_lpp
  timed pause build_pause
  timed helm build_helm
  timed dockerd start_dockerd
  timed base-image build_base
  timed node-base-image node_base
  timed node-image node_image
}

build_control_plane() {  # the API server tests' binaries only: no docker, no node image
  mkdir -p "$BIN" "$LOGS"
  find_go
  timed kubernetes build_kubernetes kube-apiserver kube-controller-manager
  timed etcd build_etcd
  ls -l "$BIN/kube-apiserver" "$BIN/kube-controller-manager" "$BIN/etcd"
}

# ------------------------------------------------------------------ cluster
cluster_exists() { in_ns "$BIN/kind" get clusters 2>/dev/null | grep -qx "$NAME"; }

create_cluster() {
  if ! cluster_exists; then
    local cfg="$RUN/kind.yaml" i
    # $SHARED is the same directory on this host and in every worker (a hostPath volume there is
    # one directory for pods on any worker: the Spark test's snapshots and reports).
    mkdir -p "$SHARED"
    {
      echo "kind: Cluster"
      echo "apiVersion: kind.x-k8s.io/v1alpha4"
      echo "nodes:"
      echo "- role: control-plane"
      for i in $(seq 1 "$WORKERS"); do
        echo "- role: worker"
        echo "  extraMounts: [{hostPath: $SHARED, containerPath: $SHARED}]"
      done
    } >"$cfg"
    in_ns "$BIN/kind" create cluster --name "$NAME" --image "$NODE_IMAGE" --config "$cfg" \
      --kubeconfig "$KUBECONFIG_FILE" --wait 300s || fail "kind create cluster"
  else
    # the nodes may have been stopped (docker stop, or dockerd restarted): start them again
    local n
    for n in $(dk ps -a --filter "label=io.x-k8s.kind.cluster=$NAME" --filter status=exited -q); do
      dk start "$n" >/dev/null
    done
    in_ns "$BIN/kind" export kubeconfig --name "$NAME" --kubeconfig "$KUBECONFIG_FILE" >/dev/null 2>&1 \
      || fail "kind export kubeconfig"
  fi
}

wait_ready() {
  local want=$(( WORKERS + 1 )) i ready
  for i in $(seq 1 300); do
    ready=$(in_ns "$BIN/kubectl" get nodes --no-headers 2>/dev/null | awk '$2=="Ready"' | wc -l)
    [ "$ready" -ge "$want" ] && return 0
    sleep 1
  done
  in_ns "$BIN/kubectl" get nodes -o wide >&2 || true
  fail "not all $want nodes Ready within 300 s"
}

route_pods() {  # the netns reaches every pod: its node's podCIDR via the node's address
  local name cidr ip
  while read -r name cidr ip; do
    [ -n "$cidr" ] && [ -n "$ip" ] || continue
    ip -n "$NS" route replace "$cidr" via "$ip" || fail "route $cidr via $ip ($name) in netns $NS"
  done < <(in_ns "$BIN/kubectl" get nodes -o \
    jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
}

up() {
  build_all
  timed cluster create_cluster
  timed nodes-ready wait_ready
  timed pod-routes route_pods
  cpu_weight
  in_ns "$BIN/kubectl" get nodes -o wide >&2
  log "up in $(( $(date +%s) - T0 )) s; eval \"\$($0 env)\"; $0 exec kubectl get pods -A"
}

# The whole cluster (three nodes: API server, etcd, every pod) lives in dockerd's cpu cgroup
# /docker, which weighs 1024 shares by default: as much as ONE host process. On this shared
# machine, at load 50 of other work, it got a few percent of the CPU: the controller missed its
# Lease renewals (no leader, the master fenced) and brokers answered sends after more than the
# client's 3 s (e2e/README.md, 2026-11-29). Like scripts/k8s-node.sh and the kubelet's kubepods:
# 1024 per CPU (FERRYMQ_KIND_CPU_SHARES overrides); `down` writes back what it found.
DOCKER_CPU_CGROUP=/sys/fs/cgroup/cpu/docker
cpu_weight() {
  local shares=${FERRYMQ_KIND_CPU_SHARES:-$(( $(nproc) * 1024 ))}
  [ -f "$DOCKER_CPU_CGROUP/cpu.shares" ] || { log "no $DOCKER_CPU_CGROUP (cgroup v2?): CPU weight left alone"; return 0; }
  [ -f "$RUN/cpu.shares.saved" ] || cp "$DOCKER_CPU_CGROUP/cpu.shares" "$RUN/cpu.shares.saved"
  echo "$shares" >"$DOCKER_CPU_CGROUP/cpu.shares" && log "cpu.shares of $DOCKER_CPU_CGROUP: $shares"
}

restore_cpu_weight() {
  [ -f "$RUN/cpu.shares.saved" ] || return 0
  [ -f "$DOCKER_CPU_CGROUP/cpu.shares" ] && cat "$RUN/cpu.shares.saved" >"$DOCKER_CPU_CGROUP/cpu.shares" \
    && log "restored cpu.shares of $DOCKER_CPU_CGROUP: $(cat "$DOCKER_CPU_CGROUP/cpu.shares")"
  rm -f "$RUN/cpu.shares.saved"
}

# ------------------------------------------------------------------ down
down() {
  step=down
  if [ -n "$(dockerd_pid)" ] && [ -x "$BIN/kind" ]; then
    in_ns "$BIN/kind" delete cluster --name "$NAME" 2>&1 | sed 's/^/  /' >&2 || true
  fi
  local pid
  pid=$(dockerd_pid)
  if [ -n "$pid" ]; then
    log "stopping dockerd (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then log "dockerd did not stop in 30 s: SIGKILL"; kill -9 "$pid" || true; fi
  fi
  rm -f "$RUN/dockerd.pid"
  if [ -e "$RUN/outside.netns" ]; then umount "$RUN/outside.netns" 2>/dev/null; rm -f "$RUN/outside.netns"; fi
  # whatever dockerd or the nodes left mounted under the cache and run directories
  local m
  for m in $(awk '{print $2}' /proc/self/mounts | grep -E "^($ROOT|$RUN)/" | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
  done
  if [ -e "/run/netns/$NS" ]; then
    ip netns del "$NS" && log "deleted netns $NS"
  fi
  if [ -f "$RUN/created-lib-modules" ]; then
    rmdir /lib/modules 2>/dev/null || true
    rm -f "$RUN/created-lib-modules"
  fi
  restore_cpu_weight
  restore_sysctls
}

restore_sysctls() {
  [ -f "$RUN/sysctl.saved" ] || return 0
  local f v cur
  while read -r f v; do
    cur=$(cat "/proc/sys/$f" 2>/dev/null || true)
    if [ "$cur" != "$v" ]; then
      echo "$v" >"/proc/sys/$f" && log "restored $f: $cur -> $v" || log "could not restore $f to $v"
    fi
  done <"$RUN/sysctl.saved"
  if [ -f "$RUN/sysctl.before" ]; then
    # Anything else VM-wide that differs now: systemd as a node's PID 1 raises fs.file-max, and any
    # sysctl.d left in an image would apply too. Per-netns (net.*) values died with the netns.
    local key val
    while IFS= read -r line; do
      key=${line%% = *} val=${line#* = }
      case $key in net.*) continue ;; esac
      if [ "$(sysctl -n "$key" 2>/dev/null)" != "$val" ]; then
        sysctl -q -w "$key=$val" 2>/dev/null && log "restored $key to $val" || log "could not restore $key to $val"
      fi
    done < <(comm -23 "$RUN/sysctl.before" <(sysctl_snapshot))
    if diff <(cat "$RUN/sysctl.before") <(sysctl_snapshot) >"$RUN/sysctl.diff"; then
      log "kernel parameters: identical to before up"
    else
      log "kernel parameters that differ from before up (other processes may change some):"
      sed 's/^/  /' "$RUN/sysctl.diff" >&2
    fi
  fi
  rm -f "$RUN/sysctl.saved" "$RUN/sysctl.before"
}

status() {
  local pid
  pid=$(dockerd_pid)
  echo "cache: $K"
  echo "netns: $([ -e "/run/netns/$NS" ] && echo "$NS" || echo none)"
  echo "dockerd: ${pid:-not running}"
  if [ -n "$pid" ]; then
    dk ps --format '{{.Names}} {{.Status}}' | sed 's/^/  /'
    in_ns "$BIN/kubectl" get nodes -o wide 2>/dev/null | sed 's/^/  /' || true
  fi
  [ -f "$RUN/sysctl.saved" ] && { echo "sysctls saved at up:"; sed 's/^/  /' "$RUN/sysctl.saved"; }
  return 0
}

# Same line: bash must not read further from this file (it may be edited) after main returns.
main "$@"; exit $?
