"""The web console of the NameServer (``consolePort``): server-rendered pages of the clusters,
brokers, topics, consumer groups and messages, and a few write actions behind a confirmation.
See docs/console.md."""
