"""What the client and the broker must agree on, written once: the commit-log record layout and
its decoders (:mod:`~pocketmq.wire.record`, :mod:`~pocketmq.wire.fast`), offset message ids
(:mod:`~pocketmq.wire.msgid`), tag expressions (:mod:`~pocketmq.wire.tags`), topic and group
name rules (:mod:`~pocketmq.wire.names`) and ``host:port`` addresses
(:mod:`~pocketmq.wire.address`).

Pure code only: no I/O, no asyncio, no gRPC. Errors derive from :class:`WireError` (a
``ValueError``); the broker and the client turn them into their own error types.
"""

from pocketmq.wire.errors import WireError

__all__ = ["WireError"]
