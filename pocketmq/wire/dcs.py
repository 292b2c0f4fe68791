"""Where a broker group's failover state lives: the etcd keys (``controllerMode=etcd``) and the
Lease annotations (``controllerMode=kubernetes``); the one owner of both layouts, shared by the
brokers' controller and ``pocketmq broker switchover``.  Meaning of each: ``docs/failover.md``."""

from __future__ import annotations

__all__ = ["K8S_EPOCH", "K8S_LEADER", "K8S_MEMBERS_SUFFIX", "K8S_MEMBER_PREFIX", "K8S_SWITCHOVER",
           "K8S_SYNC_STATE_SET", "LEADER", "MEMBERS", "SWITCHOVER", "SYNC_STATE_SET", "group_key",
           "k8s_lease_name"]

LEADER = "leader"
SYNC_STATE_SET = "syncstateset"
MEMBERS = "members/"
#: A planned switchover request: ``{"to": <brokerId or 0 for any in-sync slave>}``.
SWITCHOVER = "switchover"


def group_key(cluster: str, group: str, name: str) -> bytes:
    """The etcd key ``name`` of broker group ``group`` in cluster ``cluster``."""
    return f"/pocketmq/{cluster}/{group}/{name}".encode()


# -- controllerMode=kubernetes: the same state on coordination.k8s.io/v1 Leases ------------------
#: On the group's Lease (spec.holderIdentity = "member-<brokerId>"): the master's addresses and
#: whether it serves yet (``{brokerId, addr, haAddr, ready}``), its epoch, the SyncStateSet
#: (``{epoch, master, members}``) and a switchover request (``{to[, handover, until]}``).
K8S_LEADER = "pocketmq.io/leader"
K8S_EPOCH = "pocketmq.io/epoch"
K8S_SYNC_STATE_SET = "pocketmq.io/sync-state-set"
K8S_SWITCHOVER = "pocketmq.io/switchover"
#: On the group's second Lease ``<lease>-members``: one annotation per member,
#: ``pocketmq.io/member-<brokerId>`` = ``{brokerId, maxOffset, addr, at}``.
K8S_MEMBER_PREFIX = "pocketmq.io/member-"
K8S_MEMBERS_SUFFIX = "-members"


def k8s_lease_name(cluster: str, group: str) -> str:
    """The default Lease name of a group: ``pocketmq-<cluster>-<group>``, lower-cased, every
    character outside ``[a-z0-9-]`` replaced by ``-`` (a DNS-1123 subdomain), at most 240
    characters so that ``<name>-members`` fits too."""
    raw = f"pocketmq-{cluster}-{group}".lower()
    name = "".join(c if c.isascii() and (c.isalnum() or c == "-") else "-" for c in raw)
    return name[:240].strip("-")
