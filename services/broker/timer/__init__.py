"""Timer messages: delivery at an arbitrary time (RocketMQ 5's timer wheel + timer log, in
spirit). See ``docs/timer-and-transactions.md`` for the design and the crash guarantee."""
