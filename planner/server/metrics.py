"""Service metrics in the Prometheus text exposition format (version 0.0.4).

Counted here: HTTP requests by method, route template and status; the latency of
planning work (``/v1/plan``, ``/v1/compare``, ``/v1/lower``) as a histogram split by
cache outcome; plan-cache hits, misses, hit ratio and size (read from the cache when
rendered).  Hand-written to avoid a dependency: a few counters behind one lock.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable

#: Histogram bucket upper bounds, in seconds.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


def _number(x: float) -> str:
    return repr(float(x)) if isinstance(x, float) else str(x)


class Histogram:
    """Cumulative buckets, sum and count for one label set."""

    def __init__(self) -> None:
        self.counts = [0] * len(LATENCY_BUCKETS)
        self.total = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        for i, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1
        self.total += seconds
        self.count += 1


class Metrics:
    """Request counters and plan latencies of one app instance."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str, str]] = Counter()
        self.latency: dict[tuple[str, str], Histogram] = {}

    def count_request(self, method: str, route: str, status: int) -> None:
        with self._lock:
            self.requests[(method, route, str(status))] += 1

    def observe_plan(self, endpoint: str, cache: str, seconds: float) -> None:
        """One planning request's wall time; ``cache`` is ``hit`` or ``miss``."""
        with self._lock:
            self.latency.setdefault((endpoint, cache), Histogram()).observe(seconds)

    def server_errors(self) -> int:
        """How many responses had a 5xx status."""
        with self._lock:
            return sum(n for (_, _, status), n in self.requests.items() if status[0] == "5")

    def render(self, cache_hits: int, cache_misses: int, cache_entries: int) -> str:
        """The exposition text."""
        out: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            out.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"])

        with self._lock:
            family("planner_http_requests_total", "counter",
                   "HTTP requests by method, route template and status code.")
            for (method, route, status), n in sorted(self.requests.items()):
                labels = _labels([("method", method), ("route", route), ("status", status)])
                out.append(f"planner_http_requests_total{labels} {n}")
            family("planner_plan_latency_seconds", "histogram",
                   "Wall time of planning requests, by endpoint and plan-cache outcome.")
            for (endpoint, cache), h in sorted(self.latency.items()):
                base = [("endpoint", endpoint), ("cache", cache)]
                for bound, n in zip(LATENCY_BUCKETS, h.counts, strict=True):
                    labels = _labels([*base, ("le", _number(bound))])
                    out.append(f"planner_plan_latency_seconds_bucket{labels} {n}")
                labels = _labels([*base, ("le", "+Inf")])
                out.append(f"planner_plan_latency_seconds_bucket{labels} {h.count}")
                out.append(f"planner_plan_latency_seconds_sum{_labels(base)} {h.total!r}")
                out.append(f"planner_plan_latency_seconds_count{_labels(base)} {h.count}")
        lookups = cache_hits + cache_misses
        family("planner_plan_cache_hits_total", "counter", "Plan-cache hits.")
        out.append(f"planner_plan_cache_hits_total {cache_hits}")
        family("planner_plan_cache_misses_total", "counter", "Plan-cache misses (solves).")
        out.append(f"planner_plan_cache_misses_total {cache_misses}")
        family("planner_plan_cache_hit_ratio", "gauge", "Hits / lookups since start (0 if none).")
        out.append(f"planner_plan_cache_hit_ratio {cache_hits / lookups if lookups else 0.0!r}")
        family("planner_plan_cache_entries", "gauge", "Plans held in the cache.")
        out.append(f"planner_plan_cache_entries {cache_entries}")
        return "\n".join(out) + "\n"
