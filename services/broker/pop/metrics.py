"""Metrics of POP consumption per consumer group: popped, acked, nacked (invisible time
changed), revived (invisible time ran out), retried, dead-lettered; in-flight count and the age
of the oldest in-flight message."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

InFlightGauges = Callable[[], dict[str, tuple[int, float]]]
_EVENTS = ("popped", "acked", "nacked", "revived", "retried", "dead_lettered")


class _Gauges(Collector):
    def __init__(self, names: list[str], values: list[str], source: InFlightGauges) -> None:
        self._names, self._values, self._source = names, values, source

    def collect(self) -> Iterable[GaugeMetricFamily]:
        count = GaugeMetricFamily("pocketmq_pop_in_flight", "Popped messages not acked yet (invisible).",
                                  labels=[*self._names, "group"])
        age = GaugeMetricFamily("pocketmq_pop_oldest_in_flight_seconds",
                                "Age of the oldest popped, not acked message.",
                                labels=[*self._names, "group"])
        for group, (n, seconds) in sorted(self._source().items()):
            count.add_metric([*self._values, group], n)
            age.add_metric([*self._values, group], seconds)
        yield count
        yield age


class PopMetrics:
    def __init__(self, registry: CollectorRegistry, labels: Sequence[tuple[str, str]]) -> None:
        self.registry = registry
        self._names = [k for k, _ in labels]
        self._values = [val for _, val in labels]
        self._counter = Counter("pocketmq_pop_messages", "POP consumption events by group and kind.",
                                [*self._names, "group", "event"], registry=registry)
        self._children: dict[tuple[str, str], Any] = {}

    def _inc(self, group: str, event: str, n: int = 1) -> None:
        child = self._children.get((group, event))
        if child is None:
            # Every event of a group is exported from its first event on (0 until it happens).
            for name in _EVENTS:
                self._children[(group, name)] = self._counter.labels(*self._values, group, name)
            child = self._children[(group, event)]
        child.inc(n)

    def popped(self, group: str, n: int) -> None:
        self._inc(group, "popped", n)

    def acked(self, group: str, n: int) -> None:
        self._inc(group, "acked", n)

    def nacked(self, group: str, n: int = 1) -> None:
        self._inc(group, "nacked", n)

    def revived(self, group: str) -> None:
        self._inc(group, "revived")

    def retried(self, group: str) -> None:
        self._inc(group, "retried")

    def dead_lettered(self, group: str) -> None:
        self._inc(group, "dead_lettered")

    def add_gauges(self, source: InFlightGauges) -> None:
        self.registry.register(_Gauges(self._names, self._values, source))


EVENTS = _EVENTS
