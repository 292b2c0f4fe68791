"""The PocketMQ NameServer: broker registration and heartbeats, failure detection, topic routes.

``routeinfo`` is the pure route table, ``api`` the gRPC servicer, ``app`` the process wiring
and ``python -m services.namesrv`` the entry point.
"""
