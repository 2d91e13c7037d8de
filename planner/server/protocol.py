"""How uvicorn runs the app: connection limits that hold against slow or idle clients.

:func:`uvicorn_options` is what ``planner serve`` (and the tests' live server) pass to
``uvicorn.Config``: idle keep-alive connections close after ``keep_alive_s``, a request
head is at most ``max_header_bytes``, past ``max_connections`` uvicorn answers 503, and
:class:`HeadDeadlineProtocol` closes a connection whose request head has not arrived
``head_timeout_s`` after it opened (or after its previous response), so connections
that trickle or never finish their headers are not held open.  A body slower than
``body_timeout_s`` is the app's 408 (:class:`server.app.BodyLimitMiddleware`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from planner.server.settings import Settings


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head."""

    head_timeout_s = 10.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_timer()  # the next request's head has its own deadline

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_expired)

    def _head_expired(self) -> None:
        self._head_timer = None
        waiting_for_head = self.cycle is None or self.cycle.response_complete
        if waiting_for_head and not self.transport.is_closing():
            self.transport.close()


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config`` (besides the app) from ``settings``."""
    protocol = type("HeadDeadlineProtocol", (HeadDeadlineProtocol,),
                    {"head_timeout_s": settings.head_timeout_s})
    return {"http": protocol, "timeout_keep_alive": max(1, round(settings.keep_alive_s)),
            "limit_concurrency": settings.max_connections,
            "h11_max_incomplete_event_size": settings.max_header_bytes}
