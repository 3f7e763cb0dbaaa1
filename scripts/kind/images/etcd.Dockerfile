# registry.k8s.io/etcd:<tag> (kubeadm's static pod runs "etcd ..." from PATH)
FROM scratch
ENV PATH=/usr/local/bin:/usr/bin:/bin
COPY etcd /usr/local/bin/etcd
