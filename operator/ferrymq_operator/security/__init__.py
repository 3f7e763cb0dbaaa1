"""The operator's half of security: ACL and TLS Secrets, the cluster CA, NetworkPolicy.

Pure modules (``ca``, ``builders``, ``netpol``, ``decisions``) decide; ``secrets`` does the API
calls. The broker side (``ferrymq.acl``, ``ferrymq.remoting.tls``) reads what these configure.
"""
