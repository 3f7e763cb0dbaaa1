"""Pure builders: a parsed spec in, plain-dict Kubernetes manifests out (no API calls, no I/O)."""
