"""The plan cache: an LRU of solved plans keyed by content hashes.

A key is the SHA-256 of the canonical JSON of what determines a plan: the submitted
kernel (its JSON object with sorted keys, or its text), the target name and the
catalog file's content hash, the bindings, the declared symbol bounds, the policy and
the baseline.  Editing a catalog changes its hash, so stale entries can never be hit;
PUT/DELETE also drop the target's entries at once (:meth:`PlanCache.drop_target`) to
free the memory.

Identical requests that arrive while the first is still solving wait for it instead
of solving again (:meth:`PlanCache.get_or_compute`); they count as hits.
Whatever way the computation ends, its pending entry is removed: an error is shared
with the waiters, and a computation abandoned by its own request (the client hung up:
the exception has ``abandoned = True``) or cancelled lets each waiter compute anew.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")


def content_hash(value: object) -> str:
    """SHA-256 of ``value``'s canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class PlanKey:
    """What a plan depends on; ``digest`` is the cache key."""

    target: str
    digest: str

    @classmethod
    def of(cls, kernel: object, target: str, catalog_hash: str, bindings: Mapping[str, int],
           policy: str, baseline: str | None,
           bounds: Mapping[str, tuple[int, int]] | None = None) -> PlanKey:
        parts = {"kernel": content_hash(kernel), "target": target, "catalog": catalog_hash,
                 "bindings": dict(sorted(bindings.items())), "policy": policy,
                 "baseline": baseline,
                 "bounds": {k: [lo, hi] for k, (lo, hi) in sorted((bounds or {}).items())}}
        return cls(target, content_hash(parts))


class PlanCache(Generic[V]):
    """A thread-safe LRU of ``capacity`` values with hit/miss counters."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[PlanKey, V] = OrderedDict()
        self._inflight: dict[PlanKey, asyncio.Future[V]] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: PlanKey) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: PlanKey, value: V) -> None:
        if self.capacity == 0:
            return
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def drop_target(self, target: str) -> int:
        """Forget every entry planned for ``target``; returns how many."""
        with self._lock:
            stale = [k for k in self._entries if k.target == target]
            for k in stale:
                del self._entries[k]
            return len(stale)

    def _count(self, hit: bool) -> None:
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    async def get_or_compute(self, key: PlanKey, compute: Callable[[], Awaitable[V]],
                             keep: Callable[[V], bool] = lambda v: True) -> tuple[V, bool]:
        """The cached value (``hit`` True) or ``await compute()``, stored when ``keep``.

        Runs on the event loop; concurrent callers with the same key share one compute.
        """
        value = self.get(key)
        if value is not None:
            self._count(True)
            return value, True
        pending = self._inflight.get(key)
        if pending is not None:
            try:
                value = await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this request itself was cancelled
            else:
                self._count(True)
                return value, True
        return await self._compute(key, compute, keep), False

    async def _compute(self, key: PlanKey, compute: Callable[[], Awaitable[V]],
                       keep: Callable[[V], bool]) -> V:
        self._count(False)
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            value = await compute()
        except asyncio.CancelledError:
            future.cancel()  # waiters compute for themselves
            raise
        except BaseException as exc:
            if getattr(exc, "abandoned", False):  # e.g. this client hung up
                future.cancel()
            else:
                future.set_exception(exc)
                future.exception()  # retrieved: only the waiters re-raise it
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(value)
        if keep(value):
            self.put(key, value)
        return value
