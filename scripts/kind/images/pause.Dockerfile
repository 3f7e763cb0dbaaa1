# registry.k8s.io/pause:<tag>: Kubernetes' build/pause/linux/pause.c, gcc -static
FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
