"""POP consumption (RocketMQ 5): messages handed out invisibly with a receipt handle, acked, or
revived into the group's retry topic when their invisible time ends; see docs/pop.md."""
