# kind's default StorageClass provisioner (rancher/local-path-provisioner from the Go module proxy);
# its helper pods use the debootstrap base (sh, mkdir, rm)
FROM scratch
ENV PATH=/usr/local/bin:/usr/bin:/bin
COPY local-path-provisioner /usr/local/bin/local-path-provisioner
