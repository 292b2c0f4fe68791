"""The ``pocketmq`` command: cluster, topic, group, send, consume, consumer progress / reset /
connections, dead letters, broker status / HA status / drain / live config, message lookup
(``message get/find/browse``), the web console and benchmarks.

Every command takes ``--namesrv host:port[;host:port]`` (env ``POCKETMQ_NAMESRV``, default
127.0.0.1:9876) and ``--output table|json`` (env ``POCKETMQ_OUTPUT``). Broker calls of the admin
commands go through the NameServer's broker relay (``--access auto``, the default), so one
``kubectl port-forward svc/<release>-namesrv 9876`` reaches the whole cluster; ``--broker
host:port`` talks to one broker directly.

Exit codes: 0 success; 1 the operation failed (on at least one broker, or fewer messages than
``--count`` arrived); 2 bad usage.

This module only assembles the command tree: one module per command group in
:mod:`pocketmq.cli.commands`, the options they share in :mod:`pocketmq.cli.common`.
"""

from __future__ import annotations

import typer

from pocketmq.cli.commands import acl, bench, broker, cluster, consumer, dlq, group, lookup, messages, topic
from pocketmq.cli.commands.console import console
from pocketmq.wire.malloc import keep_freed_memory

app = typer.Typer(
    name="pocketmq",
    help="PocketMQ command line: administer a cluster, send and consume messages, benchmark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(cluster.app, name="cluster")
app.add_typer(topic.app, name="topic")
app.add_typer(group.app, name="group")
app.add_typer(consumer.app, name="consumer")
app.add_typer(broker.app, name="broker")
app.add_typer(dlq.app, name="dlq")
app.add_typer(bench.app, name="bench")
app.add_typer(lookup.app, name="message")
app.add_typer(acl.app, name="acl")
app.command("send")(messages.send)
app.command("consume")(messages.consume)
app.command("console")(console)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pocketmq`` console script."""
    keep_freed_memory()
    try:
        app(args=argv, prog_name="pocketmq", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
