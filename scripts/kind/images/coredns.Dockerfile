# registry.k8s.io/coredns/coredns:<the tag kubeadm asks for>, built from a CoreDNS release on the Go
# module proxy (the proxy starts at v1.14.3; it serves kubeadm's Corefile unchanged)
FROM scratch
COPY coredns /coredns
EXPOSE 53 53/udp
ENTRYPOINT ["/coredns"]
