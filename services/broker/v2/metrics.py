"""Metrics of the RocketMQ 5 API: requests by RPC and status code, connected clients by type,
open Telemetry streams. Registered in the broker's (or NameServer's) registry."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from services.broker.v2.status import code_name


class _ClientGauges(Collector):
    def __init__(self, labels: Sequence[tuple[str, str]], counts: Callable[[], dict[str, int]],
                 streams: Callable[[], int]) -> None:
        self._names = [k for k, _ in labels]
        self._values = [v for _, v in labels]
        self._counts = counts
        self._streams = streams

    def collect(self) -> Iterable[GaugeMetricFamily]:
        clients = GaugeMetricFamily("pocketmq_v2_clients", "Connected RocketMQ 5 API clients by type.",
                                    labels=[*self._names, "client_type"])
        for client_type, n in sorted(self._counts().items()):
            clients.add_metric([*self._values, client_type], n)
        yield clients
        streams = GaugeMetricFamily("pocketmq_v2_telemetry_streams", "Open Telemetry streams.",
                                    labels=self._names)
        streams.add_metric(self._values, self._streams())
        yield streams


class V2Metrics:
    def __init__(self, registry: CollectorRegistry, labels: Sequence[tuple[str, str]] = ()) -> None:
        self.registry = registry
        self._labels = list(labels)
        self._requests = Counter(
            "pocketmq_v2_requests", "RocketMQ 5 API requests by RPC and v2 status code.",
            [*(k for k, _ in labels), "rpc", "code"], registry=registry)
        self._children: dict[tuple[str, int], Any] = {}

    def request(self, rpc: str, code: int) -> None:
        child = self._children.get((rpc, code))
        if child is None:
            child = self._children[(rpc, code)] = self._requests.labels(
                *(v for _, v in self._labels), rpc, code_name(code))
        child.inc()

    def add_clients(self, counts: Callable[[], dict[str, int]], streams: Callable[[], int]) -> None:
        self.registry.register(_ClientGauges(self._labels, counts, streams))
