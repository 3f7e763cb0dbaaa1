#!/usr/bin/env bash
# A real single-node Kubernetes 1.20 cluster on 127.0.0.1 for the e2e suite (e2e/):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet with dockershim on a
# private Debian dockerd. Every pod runs on the host network; all traffic stays on 127.0.0.0/8.
#
#   - binaries: scripts/k8s-control-plane.sh with FERRYMQ_K8S_NODE=1 (same cache, same Debian
#     `kubernetes` source package and Go build cache; adds kube-scheduler and kubelet);
#   - dockerd (Debian docker.io) on its own socket and data root under the cache, with
#     --bridge=none --iptables=false --ip-masq=false --ip6tables=false (no container network at all),
#     and a runc wrapper (scripts/k8s-node/runc-clamp) that clamps negative oomScoreAdj to 0;
#   - a pause image compiled from Kubernetes' build/pause/linux/pause.c with gcc -static;
#   - node name/address 127.0.0.1, apiserver on 127.0.0.1:443, service CIDR 127.0.0.0/24 so the
#     `kubernetes` Service is 127.0.0.1:443 (no kube-proxy);
#   - cluster DNS: Debian's dnsmasq on 127.0.0.1:53 answering *.cluster.local with 127.0.0.1 and
#     nothing else (no upstream); the host's /etc/hosts and resolv.conf are never touched;
#   - storage: StorageClass `local-storage` (default, no provisioner, WaitForFirstConsumer) and
#     `local` PersistentVolumes with node affinity under the cache; released ones are wiped and
#     made Available again on the next `up`.
#
# Usage: scripts/k8s-node.sh up|down|env|status
#   up      provision (cold: builds binaries), start what is not running, wait until the node is
#           Ready; idempotent
#   down    stop every process by the PID it recorded, remove the pod containers, unmount what the
#           kubelet mounted under the cache
#   env     print KUBECONFIG, DOCKER_HOST, E2E_KUBECONFIG, E2E_CONTEXT ... as shell assignments
#   FERRYMQ_K8S_CACHE   cache directory (default $HOME/.cache/ferrymq-k8s; state in $CACHE/node)
#   FERRYMQ_NODE_PVS    number of local PersistentVolumes (default 12, 1Gi each)
set -euo pipefail

main() {
CACHE=${FERRYMQ_K8S_CACHE:-$HOME/.cache/ferrymq-k8s}
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$CACHE/bin"
N="$CACHE/node"
PKI="$N/pki"
RUN="$N/run"
LOGS="$N/logs"
CONTEXT=ferrymq-node-test
NODE_NAME=127.0.0.1
API_PORT=443
# Fixed ports below the ephemeral range, so tests picking free ports (32768+) never take them.
ETCD_CLIENT=12379
ETCD_PEER=12380
SERVICE_CIDR=127.0.0.0/24
SERVICE_ACCOUNT_ISSUER=https://kubernetes.default.svc.cluster.local
PAUSE_IMAGE=ferrymq.local/pause:3.4.1
PV_COUNT=${FERRYMQ_NODE_PVS:-12}
DOCKER_SOCK="$N/docker.sock"
DOCKER=/usr/bin/docker
NODE_PACKAGES=(docker.io dnsmasq-base gcc libc6-dev openssl)
step=init
reported=0
log() { printf '[k8s-node] %s\n' "$*" >&2; }
fail() { reported=1; log "FAILED at step '$step': $*"; exit 1; }
trap 'rc=$?; if [ $rc -ne 0 ] && [ $reported = 0 ]; then log "FAILED at step $step (exit $rc); see the messages above"; fi' EXIT

cmd=${1:-}
case $cmd in
  up) up ;;
  down) down ;;
  env) print_env ;;
  status) status ;;
  *) reported=1; log "usage: $0 up|down|env|status"; exit 2 ;;
esac
}

print_env() {
  cat <<ENV
export FERRYMQ_K8S_CACHE=$CACHE
export KUBECONFIG=$N/admin.kubeconfig
export E2E_KUBECONFIG=$N/admin.kubeconfig
export E2E_CONTEXT=$CONTEXT
export E2E_NODE=1
export DOCKER_HOST=unix://$DOCKER_SOCK
export PATH=$BIN:\$PATH
ENV
}

# ------------------------------------------------------------------ processes (by recorded PID)
pid_of() {  # prints the PID of a running component, or nothing
  local f="$RUN/$1.pid" pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null \
      && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"; then
    echo "$pid"
  fi
}

start() {  # start NAME MATCH ARGV... : runs ARGV in its own session, records its PID
  local name=$1 match=$2
  shift 2
  if [ -n "$(pid_of "$name" "$match")" ]; then
    return 0
  fi
  log "starting $name (log: $LOGS/$name.log)"
  setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
  echo $! >"$RUN/$name.pid"
}

stop() {  # stop NAME MATCH : SIGTERM, then SIGKILL after 20 s
  local name=$1 pid
  pid=$(pid_of "$name" "$2")
  if [ -n "$pid" ]; then
    log "stopping $name (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name did not stop in 20 s; SIGKILL"
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$RUN/$name.pid"
}

wait_until() {  # wait_until SECONDS WHAT NAME MATCH CMD... : polls CMD while NAME stays alive
  local secs=$1 what=$2 name=$3 match=$4
  shift 4
  local deadline=$(( $(date +%s) + secs ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if [ -n "$name" ] && [ -z "$(pid_of "$name" "$match")" ]; then
      tail -n 30 "$LOGS/$name.log" >&2
      fail "$name exited while waiting for $what (log: $LOGS/$name.log)"
    fi
    sleep 0.5
  done
  [ -n "$name" ] && tail -n 30 "$LOGS/$name.log" >&2
  fail "$what not reached within ${secs} s"
}

kc() { "$BIN/kubectl" --kubeconfig="$N/admin.kubeconfig" "$@"; }
dk() { "$DOCKER" -H "unix://$DOCKER_SOCK" "$@"; }

# ------------------------------------------------------------------ up
up() {
  t0=$(date +%s)
  mkdir -p "$N" "$RUN" "$LOGS" || fail "cannot create $N"
  [ "$(id -u)" -eq 0 ] || fail "needs root (dockerd, kubelet, port 443 and 53)"

  step=provision
  FERRYMQ_K8S_NODE=1 "$REPO_ROOT/scripts/k8s-control-plane.sh" --print-env >/dev/null \
    || fail "scripts/k8s-control-plane.sh (FERRYMQ_K8S_NODE=1) failed; see its messages above"
  step=apt-install
  local missing=() p
  for p in "${NODE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    [ "${FERRYMQ_K8S_SKIP_APT:-0}" = 1 ] && fail "missing packages ${missing[*]} and FERRYMQ_K8S_SKIP_APT=1"
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || fail "apt-get update"
    # No init system here; RUNLEVEL=1 keeps maintainer scripts from starting daemons.
    RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
      || fail "apt-get install ${missing[*]}"
  fi

  step=pki
  make_pki

  step=dnsmasq
  # Only *.cluster.local, always 127.0.0.1 (every pod is on the host network); no upstream server,
  # so no query ever leaves 127.0.0.0/8.
  start dnsmasq "dnsmasq" /usr/sbin/dnsmasq --keep-in-foreground --no-daemon --conf-file=/dev/null \
    --listen-address=127.0.0.1 --bind-interfaces --port=53 --no-resolv --no-hosts \
    --address=/cluster.local/127.0.0.1 --pid-file= --user=root --log-facility=-
  printf 'nameserver 127.0.0.1\noptions ndots:5\n' >"$N/resolv.conf"

  step=dockerd
  install -m 0755 "$REPO_ROOT/scripts/k8s-node/runc-clamp" "$N/runc-clamp"
  start dockerd "dockerd" /usr/sbin/dockerd --host "unix://$DOCKER_SOCK" --data-root "$N/docker" \
    --exec-root "$N/docker-exec" --pidfile "$N/docker-exec/dockerd.pid" \
    --bridge=none --iptables=false --ip-masq=false --ip6tables=false --ip-forward=false \
    --oom-score-adjust=0 --add-runtime "clamp=$N/runc-clamp" --default-runtime=clamp \
    --default-ulimit nofile=20000:20000 --default-ulimit nproc=8192:8192 \
    --exec-opt native.cgroupdriver=cgroupfs --storage-driver=overlay2
  wait_until 60 "dockerd answering on $DOCKER_SOCK" dockerd dockerd dk info
  # Containers go to the cpu cgroup /docker (cgroupfs, no QoS cgroups). Left at 1024 it weighs as
  # much as ONE busy host process, and on this shared machine (load 30-50) the pods starved: a
  # broker got 1 s of CPU in 10 min, its probes failed. Give it what the kubelet gives its
  # kubepods cgroup with QoS cgroups on: 1024 per CPU (FERRYMQ_NODE_CPU_SHARES overrides).
  local shares=${FERRYMQ_NODE_CPU_SHARES:-$(( $(nproc) * 1024 ))}
  if mkdir -p /sys/fs/cgroup/cpu/docker 2>/dev/null && echo "$shares" >/sys/fs/cgroup/cpu/docker/cpu.shares 2>/dev/null; then
    log "cpu.shares of the pods' cgroup /docker: $shares"
  else
    log "warning: could not set cpu.shares of /sys/fs/cgroup/cpu/docker (pods compete as one process)"
  fi

  step=pause-image
  if ! dk image inspect "$PAUSE_IMAGE" >/dev/null 2>&1; then
    [ -f "$BIN/pause.c" ] || fail "$BIN/pause.c missing: delete $BIN/kubelet and run again to rebuild"
    local pdir="$N/pause-build"
    rm -rf "$pdir" && mkdir -p "$pdir/rootfs"
    gcc -Os -Wall -Werror -static -DVERSION=v3.4.1-ferrymq -o "$pdir/rootfs/pause" "$BIN/pause.c" \
      || fail "gcc -static pause.c"
    tar -C "$pdir/rootfs" -c pause | dk import --change 'ENTRYPOINT ["/pause"]' \
      --change 'USER 65535:65535' - "$PAUSE_IMAGE" >/dev/null || fail "docker import $PAUSE_IMAGE"
    rm -rf "$pdir"
  fi

  step=etcd
  start etcd "$BIN/etcd" "$BIN/etcd" --name=ferrymq-node --data-dir="$N/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER" \
    --initial-cluster="ferrymq-node=http://127.0.0.1:$ETCD_PEER" --log-level=warn
  wait_until 60 "etcd healthy" etcd "$BIN/etcd" \
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$ETCD_CLIENT/health', timeout=2)"

  step=kube-apiserver
  start kube-apiserver "$BIN/kube-apiserver" "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$API_PORT --insecure-port=0 \
    --cert-dir="$N/apiserver-certs" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" --token-auth-file="$PKI/tokens.csv" \
    --authorization-mode=Node,RBAC --anonymous-auth=false \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=$SERVICE_ACCOUNT_ISSUER \
    --service-cluster-ip-range=$SERVICE_CIDR \
    --endpoint-reconciler-type=none \
    --enable-admission-plugins=NamespaceLifecycle,ServiceAccount,DefaultStorageClass,ResourceQuota,LimitRanger \
    --allow-privileged=true --kubelet-preferred-address-types=InternalIP,Hostname --v=1
  wait_until 120 "kube-apiserver /readyz" kube-apiserver "$BIN/kube-apiserver" kc get --raw /readyz

  step=kube-controller-manager
  start kube-controller-manager "$BIN/kube-controller-manager" "$BIN/kube-controller-manager" \
    --kubeconfig="$N/admin.kubeconfig" --leader-elect=false --port=0 --secure-port=0 \
    --controllers='*' --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" --service-cluster-ip-range=$SERVICE_CIDR \
    --use-service-account-credentials=false --concurrent-gc-syncs=5 --v=1
  step=kube-scheduler
  start kube-scheduler "$BIN/kube-scheduler" "$BIN/kube-scheduler" \
    --kubeconfig="$N/admin.kubeconfig" --leader-elect=false --port=0 --secure-port=0 --v=1

  step=kubelet
  mkdir -p "$N/kubelet" "$N/kubelet-certs" "$N/manifests"
  # Negative OOM scores are refused here (--oom-score-adj=0); no QoS cgroups or iptables chains
  # (no network plugin: every pod is hostNetwork); never evict or garbage-collect images.
  # AWS_EC2_METADATA_DISABLED: the kubelet's ECR credential provider would otherwise ask the EC2
  # metadata address (169.254.169.254) for credentials; nothing may leave 127.0.0.0/8.
  start kubelet "$BIN/kubelet" env AWS_EC2_METADATA_DISABLED=true "$BIN/kubelet" \
    --kubeconfig="$N/kubelet.kubeconfig" --hostname-override=$NODE_NAME --node-ip=127.0.0.1 \
    --address=127.0.0.1 --port=10250 --read-only-port=0 --healthz-bind-address=127.0.0.1 \
    --healthz-port=10248 --root-dir="$N/kubelet" --cert-dir="$N/kubelet-certs" \
    --pod-manifest-path="$N/manifests" \
    --container-runtime=docker --docker-endpoint="unix://$DOCKER_SOCK" \
    --pod-infra-container-image=$PAUSE_IMAGE --image-pull-progress-deadline=10m \
    --cluster-dns=127.0.0.1 --cluster-domain=cluster.local --resolv-conf="$N/resolv.conf" \
    --cgroup-driver=cgroupfs --cgroups-per-qos=false --enforce-node-allocatable= \
    --fail-swap-on=false --oom-score-adj=0 --make-iptables-util-chains=false \
    --hairpin-mode=none --kernel-memcg-notification=false \
    --eviction-hard='memory.available<1Mi,nodefs.available<1%,imagefs.available<1%' \
    --image-gc-high-threshold=100 --image-gc-low-threshold=99 \
    --serialize-image-pulls=false --max-pods=110 --v=1
  wait_until 120 "node $NODE_NAME registered" kubelet "$BIN/kubelet" kc get node "$NODE_NAME"
  # The kubelet refuses a loopback --node-ip ("nodeIP can't be loopback address") and then leaves
  # the addresses alone, so they are written once here: pods' status.hostIP (the brokers'
  # advertised address) and the apiserver's kubelet connections need them.
  kc patch node "$NODE_NAME" --subresource=status --type=merge -p "{\"status\":{\"addresses\":[
    {\"type\":\"InternalIP\",\"address\":\"127.0.0.1\"},{\"type\":\"Hostname\",\"address\":\"$NODE_NAME\"}]}}" \
    >/dev/null || fail "patching the node's addresses"
  wait_until 120 "node $NODE_NAME Ready" kubelet "$BIN/kubelet" node_ready

  step=storage
  storage

  step=done
  log "up in $(( $(date +%s) - t0 )) s; use: eval \"\$($0 env)\""
}

node_ready() {
  [ "$(kc get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

make_pki() {
  mkdir -p "$PKI"
  if [ ! -f "$PKI/.done" ]; then
    (
      cd "$PKI"
      openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -keyout ca.key -out ca.crt \
        -subj /CN=ferrymq-node-ca
      cat >serving.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
EXT
      openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver
      openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile serving.ext -out apiserver.crt
      openssl genrsa -out sa.key 2048
      openssl rsa -in sa.key -pubout -out sa.pub
      admin=$(openssl rand -hex 16)
      kubelet=$(openssl rand -hex 16)
      # The kubelet is system:node:<name> in system:nodes, so the Node authorizer scopes it.
      printf '%s,ferrymq-admin,ferrymq-admin-uid,system:masters\n%s,system:node:%s,kubelet-uid,system:nodes\n' \
        "$admin" "$kubelet" "$NODE_NAME" >tokens.csv
      chmod 600 tokens.csv ./*.key
      printf '%s' "$admin" >admin.token
      printf '%s' "$kubelet" >kubelet.token
    ) >"$LOGS/pki.log" 2>&1 || fail "openssl (log: $LOGS/pki.log)"
    touch "$PKI/.done"
  fi
  write_kubeconfig "$N/admin.kubeconfig" ferrymq-admin "$(cat "$PKI/admin.token")"
  write_kubeconfig "$N/kubelet.kubeconfig" "system:node:$NODE_NAME" "$(cat "$PKI/kubelet.token")"
}

write_kubeconfig() {
  cat >"$1.tmp" <<KC
apiVersion: v1
kind: Config
clusters:
- name: $CONTEXT
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    token: $3
contexts:
- name: $CONTEXT
  context:
    cluster: $CONTEXT
    user: $2
current-context: $CONTEXT
KC
  chmod 600 "$1.tmp" && mv -f "$1.tmp" "$1"
}

storage() {
  local i name dir phase
  kc apply -f - >/dev/null <<SC || fail "StorageClass local-storage"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-storage
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
SC
  for i in $(seq -w 1 "$PV_COUNT"); do
    name="ferrymq-local-pv-$i"
    dir="$N/pv/$name"
    phase=$(kc get pv "$name" -o 'jsonpath={.status.phase}' 2>/dev/null || true)
    if [ "$phase" = Released ] || [ "$phase" = Failed ]; then
      # Its claim is gone: wipe the directory and offer the volume again (what a local-volume
      # provisioner's cleaner does).
      kc delete pv "$name" --wait=true >/dev/null || fail "delete released pv $name"
      rm -rf "$dir"
      phase=""
    fi
    [ -n "$phase" ] && continue
    mkdir -p "$dir"
    kc apply -f - >/dev/null <<PV || fail "PersistentVolume $name"
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $name
  labels: {app.kubernetes.io/managed-by: k8s-node.sh}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local-storage
  local: {path: $dir}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: ["$NODE_NAME"]}
PV
  done
}

# ------------------------------------------------------------------ down
down() {
  step=down
  mkdir -p "$RUN"
  stop kubelet "$BIN/kubelet"
  if [ -n "$(pid_of dockerd dockerd)" ]; then
    # The pod containers (kubelet names them k8s_*): remove them while their daemon still runs.
    local ids
    ids=$(dk ps -aq --filter name=k8s_ 2>/dev/null || true)
    if [ -n "$ids" ]; then
      log "removing $(echo "$ids" | wc -l) pod containers"
      # shellcheck disable=SC2086
      dk rm -f $ids >/dev/null 2>&1 || true
    fi
  fi
  stop kube-scheduler "$BIN/kube-scheduler"
  stop kube-controller-manager "$BIN/kube-controller-manager"
  stop kube-apiserver "$BIN/kube-apiserver"
  stop etcd "$BIN/etcd"
  stop dockerd dockerd
  stop dnsmasq dnsmasq
  # What the kubelet (secrets, tokens) and dockerd (overlay, netns) mounted under the node dir.
  local m
  for m in $(awk -v p="$N/" 'index($2, p) == 1 {print $2}' /proc/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
  done
  log "down"
}

status() {
  local c pid
  for c in dnsmasq:dnsmasq dockerd:dockerd etcd:"$BIN/etcd" kube-apiserver:"$BIN/kube-apiserver" \
      kube-controller-manager:"$BIN/kube-controller-manager" kube-scheduler:"$BIN/kube-scheduler" \
      kubelet:"$BIN/kubelet"; do
    pid=$(pid_of "${c%%:*}" "${c#*:}")
    printf '%-24s %s\n' "${c%%:*}" "${pid:-stopped}"
  done
}

# Same line: bash must not read further from this file (it may have been edited) after main returns.
main "$@"; exit $?
