"""``pocketmq console``: run the web console on this machine against a (port-forwarded)
NameServer, for clusters whose NameServers do not serve it themselves (``consolePort``)."""

from __future__ import annotations

from typing import Annotated

import typer

from pocketmq.wire.address import DEFAULT_NAMESRV


def console(
    listen: Annotated[str, typer.Option(
        "--listen", help="host:port to serve the console on.")] = "127.0.0.1:9878",
    namesrv: Annotated[str, typer.Option(
        "--namesrv", "-n", envvar="POCKETMQ_NAMESRV", help="NameServer address(es), host:port[;host:port].")
    ] = DEFAULT_NAMESRV,
) -> None:
    """Serve the web console (clusters, topics, groups, message lookup, confirmed drain / reset /
    config) until Ctrl-C; broker calls go through the NameServer's relay."""
    from pocketmq.console.__main__ import main

    raise typer.Exit(main(["--namesrv", namesrv, "--listen", listen]))
