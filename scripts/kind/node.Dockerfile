# The kind node base: the debootstrap rootfs (systemd, Debian's containerd, runc and CNI plugins)
# plus kind's own images/base/files, taken from the kind module at build time and patched by
# scripts/kind-cluster.sh (node_base). The same steps as kind's images/base/Dockerfile, without
# the git clones of containerd/runc/CNI (no GitHub here; Debian's packages instead). The node's
# systemd applies /usr/lib/sysctl.d at boot, and fs.* / kernel.* are VM-wide, not per container:
# only kind's own network files (per netns) stay.
FROM ferrymq-kind/base:bookworm
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/usr/local/sbin/ /usr/local/sbin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
RUN chmod 755 /usr/local/bin/* /usr/local/sbin/* /kind /kind/bin /kind/bin/* \
 && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
 && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
 && ln -sf /usr/lib/systemd/systemd /sbin/init \
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \
 && systemctl mask systemd-binfmt.service \
 && mkdir -p /etc/kubernetes/manifests /opt/cni /etc/cni/net.d && ln -sfn /usr/lib/cni /opt/cni/bin \
 && ctr oci spec \
    | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
    | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
 && rm -f /etc/machine-id && touch /etc/machine-id \
 && find /usr/lib/sysctl.d /etc/sysctl.d -name '*.conf' ! -name '10-network-*.conf' -delete
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
