"""The group's failover state on ``coordination.k8s.io/v1`` Leases (``controllerMode=kubernetes``),
the same interface as :class:`~services.broker.controller.dcs.EtcdDcs`.  Layout (annotation names:
:mod:`pocketmq.wire.dcs`; design: ``docs/failover.md``):

- the Lease ``<name>``: ``spec.holderIdentity`` = ``member-<brokerId>`` of the master, renewed
  (``renewTime``) every controllerRenewInterval; annotations carry the master's addresses and
  readiness, the epoch (one more than the previous holder's, also counted by
  ``leaseTransitions``), the SyncStateSet and a switchover request;
- the Lease ``<name>-members``: one annotation per member with its max offset.

Every write is a read followed by a replace carrying the ``resourceVersion`` just read, so the
API server lets through exactly one of two racing writers (the other gets 409 Conflict and
reads again).  Whether a Lease (or a member record) is still alive is judged the way client-go
does it: by this process's monotonic clock since it last saw the record change, never by
comparing the writer's wall clock with ours.

The ``kubernetes`` client is blocking: every call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

from pocketmq.wire.dcs import (
    K8S_EPOCH,
    K8S_LEADER,
    K8S_MEMBER_PREFIX,
    K8S_MEMBERS_SUFFIX,
    K8S_SWITCHOVER,
    K8S_SYNC_STATE_SET,
    k8s_lease_name,
)
from services.broker.controller.dcs import Leader, MemberRecord, SyncStateSet, member_json, member_record
from services.common.config import ConfigError

__all__ = ["KubernetesDcs", "api_client_from", "lease_name_of", "namespace_of"]

log = logging.getLogger(__name__)

#: Attempts of one conditional write that keeps losing races (409) before giving up.
_WRITE_ATTEMPTS: Final = 4

Obj = dict[str, Any]
_T = TypeVar("_T")


def _stamp() -> str:
    """Now as a Kubernetes MicroTime."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _identity(broker_id: int) -> str:
    return f"member-{broker_id}"


def _annotations(obj: Obj) -> dict[str, str]:
    meta = obj.setdefault("metadata", {})
    if meta.get("annotations") is None:
        meta["annotations"] = {}
    annotations: dict[str, str] = meta["annotations"]
    return annotations


def _epoch(obj: Obj) -> int:
    return int(_annotations(obj).get(K8S_EPOCH, "0"))


def api_client_from(api_server: str, kubeconfig: str) -> Any:
    """A ``kubernetes.client.ApiClient``: credentials from ``kubeconfig`` if given, else the
    in-cluster ServiceAccount when in a pod, else the default kubeconfig; ``api_server`` (if
    given) replaces the server URL.  Raises ConfigError naming the key at fault."""
    from kubernetes import client, config

    from services.broker.k8s_labels import in_cluster

    configuration = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        elif in_cluster():
            config.load_incluster_config(client_configuration=configuration)
        elif not api_server:
            config.load_kube_config(client_configuration=configuration)
    except Exception as exc:
        key = "controllerK8sKubeconfig" if kubeconfig else "controllerK8sApiServer"
        raise ConfigError(key, "controllerMode=kubernetes outside a pod needs a kubeconfig or the API "
                               f"server's URL ({exc})") from exc
    if api_server:
        configuration.host = api_server.rstrip("/")
    return client.ApiClient(configuration)


def namespace_of(configured: str) -> str:
    """controllerK8sNamespace, else this pod's namespace (POD_NAMESPACE, the ServiceAccount's
    namespace file), else ``default``."""
    from services.broker.k8s_labels import own_pod

    return configured or own_pod().namespace


def lease_name_of(configured: str, cluster: str, group: str) -> str:
    return configured or k8s_lease_name(cluster, group)


class KubernetesDcs:
    """One member's view of its group's Leases (see the module doc)."""

    def __init__(self, api_client: Any, namespace: str, lease_name: str, ttl_s: float, renew_s: float,
                 timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        from kubernetes import client

        #: Also used by the broker to label its pod with its role (services.broker.k8s_labels).
        self.api_client = api_client
        self._api = client.CoordinationV1Api(api_client)
        self._conflict = client.ApiException
        self.namespace, self.lease_name = namespace, lease_name
        self.members_name = lease_name + K8S_MEMBERS_SUFFIX
        self.ttl_s = ttl_s
        self._duration_s = max(1, math.ceil(ttl_s))
        self._renew_s = renew_s
        self._timeout_s = timeout_s
        self._clock = clock
        #: (identity, epoch) while this member holds the Lease.
        self._held: tuple[str, int] | None = None
        #: record key -> (what it said, when this process first saw it say so)
        self._seen: dict[str, tuple[object, float]] = {}
        self._member_written = -math.inf
        self._member_leaderless = False

    # -- blocking helpers (worker threads) ---------------------------------------------------

    def _read(self, name: str) -> Obj | None:
        try:
            reply = self._api.read_namespaced_lease(name, self.namespace, _preload_content=False,
                                                    _request_timeout=self._timeout_s)
        except self._conflict as exc:
            if exc.status == 404:
                return None
            raise
        obj: Obj = json.loads(reply.data)
        return obj

    def _create(self, name: str, obj: Obj) -> bool:
        obj.setdefault("metadata", {}).update(name=name, namespace=self.namespace)
        obj.update(apiVersion="coordination.k8s.io/v1", kind="Lease")
        try:
            self._api.create_namespaced_lease(self.namespace, obj, _request_timeout=self._timeout_s)
        except self._conflict as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def _replace(self, name: str, obj: Obj) -> bool:
        """Write ``obj`` back with the resourceVersion it was read with: False on 409 Conflict."""
        try:
            self._api.replace_namespaced_lease(name, self.namespace, obj, _request_timeout=self._timeout_s)
        except self._conflict as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def _update(self, name: str, mutate: Callable[[Obj], bool], create: bool = False) -> bool:
        """Read, ``mutate`` (False: leave it), write back conditionally; again after a 409."""
        for _ in range(_WRITE_ATTEMPTS):
            obj = self._read(name)
            if obj is None:
                if not create:
                    return False
                obj = {"spec": {}}
                if not mutate(obj):
                    return False
                if self._create(name, obj):
                    return True
                continue
            if not mutate(obj):
                return False
            if self._replace(name, obj):
                return True
        log.warning("Lease write lost every race", extra={"lease": name, "attempts": _WRITE_ATTEMPTS})
        return False

    def _alive(self, key: str, record: object, duration_s: float) -> bool:
        """Whether ``record`` changed within ``duration_s`` by this process's clock."""
        now = self._clock()
        seen = self._seen.get(key)
        if seen is None or seen[0] != record:
            self._seen[key] = (record, now)
            return True
        return now - seen[1] < duration_s

    def _holder_alive(self, obj: Obj) -> str:
        """The Lease's holder if its lease has not run out, else ''."""
        spec = obj.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        if not holder:
            return ""
        duration = max(float(spec.get("leaseDurationSeconds") or self._duration_s), self.ttl_s)
        return holder if self._alive("lease", (holder, spec.get("renewTime"), _epoch(obj)), duration) else ""

    def _mine(self, obj: Obj) -> bool:
        held = self._held
        return (held is not None and (obj.get("spec") or {}).get("holderIdentity") == held[0]
                and _epoch(obj) == held[1])

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.to_thread(fn, *args)

    # -- the leader Lease --------------------------------------------------------------------

    def _leader_sync(self) -> Leader | None:
        obj = self._read(self.lease_name)
        if obj is None or not self._holder_alive(obj):
            return None
        info = json.loads(_annotations(obj).get(K8S_LEADER) or "{}")
        if not info:
            return None
        return Leader(int(info["brokerId"]), str(info["addr"]), str(info["haAddr"]), _epoch(obj),
                      bool(info.get("ready", True)))

    async def leader(self) -> Leader | None:
        return await self._run(self._leader_sync)

    def _campaign_sync(self, broker_id: int, addr: str, ha_addr: str, floor: int) -> int | None:
        identity = _identity(broker_id)
        obj = self._read(self.lease_name)
        stamp = _stamp()
        leader = json.dumps({"brokerId": broker_id, "addr": addr, "haAddr": ha_addr, "ready": False})
        spec = {"holderIdentity": identity, "leaseDurationSeconds": self._duration_s, "acquireTime": stamp,
                "renewTime": stamp}
        if obj is None:
            epoch = floor + 1
            fresh: Obj = {"metadata": {"annotations": {K8S_EPOCH: str(epoch), K8S_LEADER: leader}},
                          "spec": {**spec, "leaseTransitions": 0}}
            if not self._create(self.lease_name, fresh):
                return None
        else:
            if self._holder_alive(obj) not in ("", identity):
                return None
            transitions = int((obj.get("spec") or {}).get("leaseTransitions") or 0)
            epoch = max(_epoch(obj), transitions, floor) + 1
            obj["spec"] = {**(obj.get("spec") or {}), **spec, "leaseTransitions": transitions + 1}
            _annotations(obj).update({K8S_EPOCH: str(epoch), K8S_LEADER: leader})
            if not self._replace(self.lease_name, obj):
                return None
        self._held = (identity, epoch)
        return epoch

    async def campaign(self, broker_id: int, addr: str, ha_addr: str, floor: int = 0) -> int | None:
        """Take the Lease if nobody holds it (or its holder's lease ran out): the new epoch (above
        ``floor``, the newest epoch in the candidate's store: a Lease deleted or a group moved
        from etcd starts over without going back), or None."""
        return await self._run(self._campaign_sync, broker_id, addr, ha_addr, floor)

    async def mark_ready(self, epoch: int, broker_id: int, addr: str, ha_addr: str) -> bool:
        value = json.dumps({"brokerId": broker_id, "addr": addr, "haAddr": ha_addr, "ready": True})

        def mutate(obj: Obj) -> bool:
            if not self._mine(obj) or _epoch(obj) != epoch:
                return False
            _annotations(obj)[K8S_LEADER] = value
            return True
        return await self._run(self._update, self.lease_name, mutate)

    async def renew(self) -> bool:
        """Refresh ``renewTime``: False when the Lease is no longer this member's."""
        if self._held is None:
            return False

        def mutate(obj: Obj) -> bool:
            if not self._mine(obj):
                return False
            obj["spec"]["renewTime"] = _stamp()
            return True
        if await self._run(self._update, self.lease_name, mutate):
            return True
        self._held = None
        return False

    async def resign(self) -> None:
        """Empty the holder at once (planned switchover or shutdown of the master)."""
        if self._held is None:
            return

        def mutate(obj: Obj) -> bool:
            if not self._mine(obj):
                return False
            obj["spec"]["holderIdentity"] = ""
            return True
        try:
            await self._run(self._update, self.lease_name, mutate)
        finally:
            self._held = None

    # -- SyncStateSet ------------------------------------------------------------------------

    async def release(self, epoch: int, broker_id: int) -> str:
        """A demoted master empties the holder once the API answers again, only if the Lease is
        still its own of ``epoch`` (a resourceVersion-conditioned write), instead of leaving it
        until the Lease duration runs out.  Returns ``released``, ``gone`` or ``other`` (another
        master's Lease, left alone)."""
        identity = _identity(broker_id)
        outcome = "gone"

        def mutate(obj: Obj) -> bool:
            nonlocal outcome
            holder = (obj.get("spec") or {}).get("holderIdentity")
            if holder != identity or _epoch(obj) != epoch:
                outcome = "other" if holder and self._holder_alive(obj) else "gone"
                return False
            obj["spec"]["holderIdentity"] = ""
            return True
        try:
            return "released" if await self._run(self._update, self.lease_name, mutate) else outcome
        finally:
            self._held = None

    async def publish_sync_state(self, state: SyncStateSet) -> bool:
        """Write the SyncStateSet if the Lease is still the master's of ``state.epoch``."""
        value = json.dumps({"epoch": state.epoch, "master": state.master, "members": sorted(state.members)})

        def mutate(obj: Obj) -> bool:
            if (obj.get("spec") or {}).get("holderIdentity") != _identity(state.master) or \
                    _epoch(obj) != state.epoch:
                return False
            _annotations(obj)[K8S_SYNC_STATE_SET] = value
            return True
        return await self._run(self._update, self.lease_name, mutate)

    def _sync_state_sync(self) -> SyncStateSet | None:
        obj = self._read(self.lease_name)
        raw = _annotations(obj).get(K8S_SYNC_STATE_SET) if obj is not None else None
        if not raw:
            return None
        value = json.loads(raw)
        members = frozenset(int(m) for m in value["members"])
        return SyncStateSet(int(value["epoch"]), int(value["master"]), members)

    async def sync_state(self) -> SyncStateSet | None:
        return await self._run(self._sync_state_sync)

    # -- members -----------------------------------------------------------------------------

    async def publish_member(self, broker_id: int, max_offset: int, addr: str,
                             leaderless: bool = False) -> None:
        """This member's max offset (written at most every controllerRenewInterval, and at once
        when ``leaderless`` changes; the record also shows the member alive)."""
        now = self._clock()
        if now - self._member_written < self._renew_s and leaderless == self._member_leaderless:
            return
        value = member_json(broker_id, max_offset, addr, leaderless, at=int(time.time() * 1000))

        def mutate(obj: Obj) -> bool:
            _annotations(obj)[f"{K8S_MEMBER_PREFIX}{broker_id}"] = value
            return True
        if await self._run(self._update, self.members_name, mutate, True):
            self._member_written = now
            self._member_leaderless = leaderless

    def _members_sync(self) -> dict[int, MemberRecord]:
        obj = self._read(self.members_name)
        return dict(member_record(json.loads(raw))
                    for key, raw in (_annotations(obj) if obj is not None else {}).items()
                    if key.startswith(K8S_MEMBER_PREFIX) and self._alive(key, raw, self.ttl_s))

    async def members(self) -> dict[int, MemberRecord]:
        """Live members' records by brokerId."""
        return await self._run(self._members_sync)

    # -- planned switchover ------------------------------------------------------------------

    @staticmethod
    def _switchover_of(obj: Obj) -> int | None:
        raw = _annotations(obj).get(K8S_SWITCHOVER)
        if not raw:
            return None
        value = json.loads(raw)
        if value.get("handover") and int(value.get("until", 0)) < time.time() * 1000:
            return None  # a hand-over nobody took in time
        return int(value.get("to", 0))

    def _switchover_sync(self) -> int | None:
        obj = self._read(self.lease_name)
        return self._switchover_of(obj) if obj is not None else None

    async def switchover(self) -> int | None:
        """A pending planned switchover: the requested target (0 = any in-sync slave), or None."""
        return await self._run(self._switchover_sync)

    async def hand_over(self, target: int) -> None:
        """Name the member that takes over (the others then do not campaign), for a few TTLs."""
        until = int((time.time() + 3 * self.ttl_s) * 1000)
        value = json.dumps({"to": target, "handover": True, "until": until})

        def mutate(obj: Obj) -> bool:
            _annotations(obj)[K8S_SWITCHOVER] = value
            return True
        await self._run(self._update, self.lease_name, mutate)

    async def clear_switchover(self) -> None:
        def mutate(obj: Obj) -> bool:
            return _annotations(obj).pop(K8S_SWITCHOVER, None) is not None
        await self._run(self._update, self.lease_name, mutate)

    async def failed(self) -> None:
        """After an error: nothing to reset (every call reads afresh)."""

    async def close(self) -> None:
        await self._run(self.api_client.close)
