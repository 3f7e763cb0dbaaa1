"""A loopback HTTP proxy to a 1.20 API server that completes Service ports in apply patches.

Spark 4's submission client creates the driver's Service with server-side apply and leaves the
ports' ``protocol`` out (the API server defaults it). kube-apiserver 1.20.2, the single-node
cluster's, rejects such a patch before defaulting: "failed to create typed patch object:
.spec.ports: element 0: associative list with keys has an element that omits key field
"protocol"". This proxy forwards every request unchanged with the kubeconfig's bearer token,
except that it adds ``protocol: TCP`` (the API's own default) to Service ports of apply patches
that omit it. Only the submitting side uses it; the driver pod talks to the API server directly.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

_HOP = {"host", "connection", "content-length", "transfer-encoding", "keep-alive", "authorization"}


def complete_service_ports(body: bytes) -> bytes:
    """An apply patch of a Service with ``protocol: TCP`` on every port that has none."""
    doc: Any = yaml.safe_load(body)  # JSON or YAML, both are apply-patch+yaml
    if not isinstance(doc, dict) or doc.get("kind") != "Service":
        return body
    for port in (doc.get("spec") or {}).get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    return json.dumps(doc).encode()


def _upstream(kubeconfig: str, context: str) -> tuple[str, ssl.SSLContext, str]:
    cfg = yaml.safe_load(Path(kubeconfig).read_text())
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == context)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
    if "token" not in user or "certificate-authority" not in cluster:
        raise ValueError("the proxy supports kubeconfigs with a token and a CA file only")
    tls = ssl.create_default_context(cafile=cluster["certificate-authority"])
    return str(cluster["server"]), tls, str(user["token"])


@contextmanager
def apply_patch_proxy(kubeconfig: str, context: str) -> Iterator[str]:
    """Serve the proxy on 127.0.0.1 (a free port) and yield its URL; stopped on exit."""
    server_url, tls, token = _upstream(kubeconfig, context)
    target = urlsplit(server_url)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            ctype = self.headers.get("Content-Type", "")
            if body and self.command == "PATCH" and "apply-patch" in ctype:
                body = complete_service_ports(body)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            headers["Authorization"] = f"Bearer {token}"
            conn = http.client.HTTPSConnection(
                target.hostname or "127.0.0.1", target.port or 443, context=tls, timeout=120
            )
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            finally:
                conn.close()
            self.send_response(resp.status)
            for key, value in resp.getheaders():
                if key.lower() not in _HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, name="apply-patch-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
