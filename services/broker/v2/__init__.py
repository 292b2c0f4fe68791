"""RocketMQ 5 gRPC API (``apache.rocketmq.v2.MessagingService``) served by the broker.

Small modules, one concern each: :mod:`status` (v2 status codes and error mapping),
:mod:`resources` (request metadata, namespaces, resource names), :mod:`route` (MessageQueue
lists from routes), :mod:`settings` (the settings answered on Telemetry), :mod:`clients`
(the connected-client registry), :mod:`telemetry` (the bidirectional stream and the
transaction checker), :mod:`produce` (SendMessage), :mod:`transaction` (EndTransaction),
:mod:`metrics` and :mod:`service` (the servicer that wires them). The NameServer reuses the pure
ones (status, resources, route) for its QueryRoute.
"""
