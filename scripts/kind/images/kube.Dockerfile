# registry.k8s.io/kube-{apiserver,controller-manager,scheduler}:<version>: one static binary
# (kubeadm's static pods run it by name from PATH).
FROM scratch
ARG BIN
ENV PATH=/usr/local/bin:/usr/bin:/bin
COPY ${BIN} /usr/local/bin/${BIN}
