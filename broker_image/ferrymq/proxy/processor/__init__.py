"""Protocol-neutral operations (upstream ``proxy/processor``): the gRPC handlers call these, and
these call the :class:`~ferrymq.proxy.backend.Backend`; nothing here knows gRPC."""
