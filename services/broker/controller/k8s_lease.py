"""Leader election on a ``coordination.k8s.io/v1`` Lease (the ``kubernetes`` package), the way
client-go's leader election does it: read the Lease, and write it back only with the
``resourceVersion`` just read, so of two candidates racing for an expired Lease the API server
lets exactly one through (the other gets 409 Conflict).  Expiry is judged by the candidates'
clocks (``renewTime + leaseDurationSeconds``); every change of holder increments
``leaseTransitions``, which numbers the epochs.

This is the election step only: ``controllerMode=kubernetes`` is not wired to it yet (see
``docs/failover.md``).  The client is blocking: call it from a thread.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

__all__ = ["LeaseElection", "LeaseState"]


@dataclass(frozen=True)
class LeaseState:
    holder: str
    transitions: int
    renew_time: datetime.datetime | None
    duration_s: int


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _stamp(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElection:
    """One candidate (``identity``) for the Lease ``name`` in ``namespace``."""

    def __init__(self, api_client: Any, namespace: str, name: str, identity: str, duration_s: int) -> None:
        from kubernetes import client

        self._api = client.CoordinationV1Api(api_client)
        self._exc = client.ApiException
        self.namespace, self.name, self.identity, self.duration_s = namespace, name, identity, duration_s
        #: The epoch (leaseTransitions + 1) of the last successful acquisition (0: none).
        self.epoch = 0

    def read(self) -> tuple[LeaseState, str] | None:
        """The Lease's state and resourceVersion, or None when it does not exist."""
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace)
        except self._exc as exc:
            if exc.status == 404:
                return None
            raise
        spec = lease.spec
        return (LeaseState(spec.holder_identity or "", int(spec.lease_transitions or 0), spec.renew_time,
                           int(spec.lease_duration_seconds or self.duration_s)),
                str(lease.metadata.resource_version))

    def try_acquire_or_renew(self, now: datetime.datetime | None = None) -> bool:
        """Take the Lease if it is free or expired, or renew it if held: True when this candidate
        holds it afterwards.  A write that lost a race (409 Conflict) returns False."""
        now = now or _now()
        current = self.read()
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration_s,
                     "renewTime": _stamp(now)},
        }
        try:
            if current is None:
                body["spec"].update(acquireTime=_stamp(now), leaseTransitions=0)
                self._api.create_namespaced_lease(self.namespace, body)
                self.epoch = 1
                return True
            state, version = current
            held = state.holder == self.identity
            expired = state.renew_time is None or (
                state.renew_time + datetime.timedelta(seconds=state.duration_s) < now)
            if not held and state.holder and not expired:
                return False
            transitions = state.transitions if held else state.transitions + 1
            body["metadata"]["resourceVersion"] = version
            body["spec"]["leaseTransitions"] = transitions
            if not held:
                body["spec"]["acquireTime"] = _stamp(now)
            self._api.replace_namespaced_lease(self.name, self.namespace, body)
            self.epoch = transitions + 1
            return True
        except self._exc as exc:
            if exc.status == 409:
                return False
            raise

    def release(self) -> bool:
        """Give the Lease up (holder emptied), if still held; False when someone else holds it."""
        current = self.read()
        if current is None or current[0].holder != self.identity:
            return False
        state, version = current
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": version},
                "spec": {"holderIdentity": "", "leaseDurationSeconds": state.duration_s,
                         "leaseTransitions": state.transitions}}
        try:
            self._api.replace_namespaced_lease(self.name, self.namespace, body)
        except self._exc as exc:
            if exc.status == 409:
                return False
            raise
        return True
