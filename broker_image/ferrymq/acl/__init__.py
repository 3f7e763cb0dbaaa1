"""Plain ACL (upstream ``acl/`` module, 4.x "plain" flavour): accounts from ``plain_acl.yml``,
requests signed with AccessKey/SecretKey (HMAC-SHA1), permission decisions per request code.

Modules: ``permission`` (PUB/SUB/DENY bits, admin codes), ``remote_address`` (white-list
patterns), ``signature`` (upstream AclUtils), ``plain_config`` (the yml model and where it is
found), ``resources`` (request code -> resources and permissions, upstream
PlainAccessResource.parse), ``validator`` (the decision, pure), ``guard`` (the server hook that
answers NO_PERMISSION, with counters), ``watcher`` (reload on file change).
"""
