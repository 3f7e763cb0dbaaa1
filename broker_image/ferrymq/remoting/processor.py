"""The processor contract: a handler per request code, looked up through one table.

A handler receives the channel the request came on and the request. It returns the response, or
``None`` for no response (oneway requests, or a handler that answered through the channel itself). It
may be a plain function (answered inline, no task) or a coroutine function (run as a task, so a long
poll can wait without blocking the connection).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Union

from ferrymq.remoting.codes import ResponseCode

if TYPE_CHECKING:
    from ferrymq.remoting.channel import Channel
    from ferrymq.remoting.command import RemotingCommand

HandlerResult = Union["RemotingCommand", None, Awaitable[Union["RemotingCommand", None]]]
Handler = Callable[["Channel", "RemotingCommand"], HandlerResult]


def not_supported(channel: Channel, request: RemotingCommand) -> RemotingCommand:
    """Default answer for an unknown code, as upstream: REQUEST_CODE_NOT_SUPPORTED with a remark."""
    return request.response(
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        f"request code {request.code} not supported",
    )


class ProcessorTable:
    """Code -> handler. All registrations of a server happen in one place (its app module)."""

    def __init__(self) -> None:
        self._handlers: dict[int, Handler] = {}
        self._default: Handler = not_supported

    def register(self, code: int, handler: Handler) -> None:
        self._handlers[int(code)] = handler

    def register_default(self, handler: Handler) -> None:
        self._default = handler

    def lookup(self, code: int) -> Handler:
        return self._handlers.get(code, self._default)

    def __contains__(self, code: int) -> bool:
        return code in self._handlers
