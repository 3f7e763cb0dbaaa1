# registry.k8s.io/kube-proxy:<version>: needs iptables and conntrack, so the debootstrap base.
# kubeadm's DaemonSet runs /usr/local/bin/kube-proxy: the wrapper picks the iptables backend first.
FROM ferrymq-kind/base:bookworm
COPY kube-proxy /usr/local/bin/kube-proxy.real
COPY kube-proxy-wrapper /usr/local/bin/kube-proxy
