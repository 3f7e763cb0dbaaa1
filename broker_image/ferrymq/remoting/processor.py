"""The processor contract: a handler per request code, looked up through one table.

A handler receives the channel the request came on and the request. It returns the response, or
``None`` for no response (oneway requests, or a handler that answered through the channel itself). It
may be a plain function (answered inline, no task) or a coroutine function (run as a task, so a long
poll can wait without blocking the connection).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, TypeVar, Union

from ferrymq.remoting.codes import ResponseCode

if TYPE_CHECKING:
    from ferrymq.remoting.channel import Channel
    from ferrymq.remoting.command import RemotingCommand

HandlerResult = Union["RemotingCommand", None, Awaitable[Union["RemotingCommand", None]]]
Handler = Callable[["Channel", "RemotingCommand"], HandlerResult]
# runs before every handler (upstream's server RPC hook, e.g. the ACL check): a response to send
# instead of handling the request, or None to go on
Guard = Callable[["Channel", "RemotingCommand"], Union["RemotingCommand", None]]
AsyncHandler = Callable[
    ["Channel", "RemotingCommand"], Coroutine[Any, Any, Union["RemotingCommand", None]]
]

T = TypeVar("T")


class _Resume:
    """The rest of a coroutine that was stepped once outside a task and suspended on ``first``.

    ``await _Resume(coro, first)`` behaves as if the awaiting task had run ``coro`` from the
    start: it yields what the coroutine yielded, sends results in and throws exceptions
    (cancellation included) through.
    """

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        yielded = self._first
        self._first = None
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # re-thrown into the coroutine (cancellation too)
                try:
                    yielded = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


async def _finish(coro: Coroutine[Any, Any, T], first: Any) -> T:
    result: T = await _Resume(coro, first)
    return result


def run_eagerly(coro: Coroutine[Any, Any, T]) -> T | Coroutine[Any, Any, T]:
    """Run ``coro`` on the caller's stack until it first suspends (Python 3.12's eager tasks).

    Returns the result when it completes without waiting (a send on an ASYNC_FLUSH broker), which
    saves a task, two loop turns and a done callback per request; otherwise a coroutine that
    resumes it, for the caller to run as a task. Exceptions of the eager part propagate.
    The eager part runs outside any task, so it must not need ``asyncio.current_task()``.
    """
    try:
        first = coro.send(None)
    except StopIteration as stop:
        result: T = stop.value
        return result
    return _finish(coro, first)


def eager(handler: AsyncHandler) -> Handler:
    """A coroutine handler served eagerly (see ``run_eagerly``): answered inline when it can be."""

    def run(channel: Channel, request: RemotingCommand) -> HandlerResult:
        return run_eagerly(handler(channel, request))

    run.__name__ = getattr(handler, "__name__", "eager_handler")
    run.__qualname__ = getattr(handler, "__qualname__", run.__name__)
    return run


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
        self.guard: Guard | None = None

    def set_guard(self, guard: Guard | None) -> None:
        """Check every request with ``guard`` before its handler (one guard per table)."""
        self.guard = guard

    def register(self, code: int, handler: Handler) -> None:
        self._handlers[int(code)] = handler

    def register_default(self, handler: Handler) -> None:
        self._default = handler

    def lookup(self, code: int) -> Handler:
        return self._handlers.get(code, self._default)

    def __contains__(self, code: int) -> bool:
        return code in self._handlers
