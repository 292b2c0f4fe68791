"""Where a broker group's failover state lives in etcd (``controllerMode=etcd``): the one owner of
the key layout, shared by the brokers' controller and ``pocketmq broker switchover``.  Meaning of
each key: ``docs/failover.md``."""

from __future__ import annotations

__all__ = ["LEADER", "MEMBERS", "SWITCHOVER", "SYNC_STATE_SET", "group_key"]

LEADER = "leader"
SYNC_STATE_SET = "syncstateset"
MEMBERS = "members/"
#: A planned switchover request: ``{"to": <brokerId or 0 for any in-sync slave>}``.
SWITCHOVER = "switchover"


def group_key(cluster: str, group: str, name: str) -> bytes:
    """The etcd key ``name`` of broker group ``group`` in cluster ``cluster``."""
    return f"/pocketmq/{cluster}/{group}/{name}".encode()
