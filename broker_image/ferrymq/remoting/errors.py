"""Transport-level failures of a remoting call (response codes are the client's business, not these)."""

from __future__ import annotations


class RemotingError(Exception):
    """Base of every transport failure."""


class RemotingConnectError(RemotingError):
    """The peer could not be reached."""


class RemotingTimeoutError(RemotingError):
    """No response within the call's timeout; the request may or may not have been processed."""


class RemotingSendRequestError(RemotingError):
    """The connection closed before the response arrived."""
