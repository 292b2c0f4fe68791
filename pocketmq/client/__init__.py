"""The PocketMQ client: producers, consumers and admin calls, asyncio-first with blocking
faces. The names users need are re-exported by :mod:`pocketmq`."""
