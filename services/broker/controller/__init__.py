"""Automatic failover of a broker group: a leader lease in a coordination service (etcd), the
SyncStateSet, epochs and the in-process role switch.  Design: ``docs/failover.md``.

:mod:`.dcs` talks to etcd (the only module with an etcd client); :mod:`.runner` runs the broker
under the lease and switches its role.
"""
