"""The web console: server-rendered pages of the clusters, brokers, topics, consumer groups and
messages, and a few write actions behind a confirmation, built on the admin client. The
NameServer runs it next to itself when ``consolePort`` is set; ``pocketmq console`` runs it on
an operator's machine against a port-forwarded NameServer. See docs/operations.md."""
