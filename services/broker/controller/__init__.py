"""Automatic failover of a broker group: a leader lease in a coordination service (etcd, or a
Kubernetes Lease), the SyncStateSet, epochs and the in-process role switch.  Design:
``docs/failover.md``.

:mod:`.dcs` defines what the controller needs of the coordination service and talks to etcd (the
only module with an etcd client); :mod:`.k8s_dcs` keeps the same state on Kubernetes Leases (the
only module writing Leases); :mod:`.runner` runs the broker under the lease and switches its role.
"""
