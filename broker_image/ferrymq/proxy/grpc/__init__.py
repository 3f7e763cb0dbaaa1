"""The gRPC side of the proxy: server, metadata, client settings, Telemetry channels, handlers."""
