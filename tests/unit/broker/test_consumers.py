from __future__ import annotations

from services.broker.consumers import ConsumerManager


def test_membership_and_expiry() -> None:
    now = [100.0]
    m = ConsumerManager(expiry_s=10, clock=lambda: now[0])
    assert m.heartbeat("g", "c2", {"t": "*"}) is True
    assert m.heartbeat("g", "c1", {"t": "*"}) is True
    assert m.heartbeat("g", "c1", {"t": "*"}) is False
    assert m.heartbeat("g", "c1", {"t": "a || b"}) is True
    assert m.members("g") == ["c1", "c2"]
    assert m.member_count() == 2
    now[0] += 8
    m.heartbeat("g", "c1", {"t": "a || b"})
    now[0] += 5
    assert m.scan_expired() == [("g", "c2")]
    assert m.members("g") == ["c1"]
    assert m.unregister("g", "c1") is True
    assert m.unregister("g", "c1") is False
    assert m.members("g") == [] and m.groups() == []
