"""What the commands share: the connection options (``--namesrv``, ``--output``, ``--timeout``,
``--tls``/``--ca-file``/``--cert-file``/``--key-file`` and
the broker-targeting ``--cluster``/``--broker``/``--access``), defined once here and added to a
command by :func:`connected`; the :class:`Conn` they arrive in, which builds the admin client and
runs the command's coroutine with PocketMQ errors turned into exit codes."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import inspect
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any, TypeVar

import typer

from pocketmq.cli.output import Output, print_json, proto_dict, stderr_console
from pocketmq.errors import PocketMQError
from pocketmq.wire.address import DEFAULT_NAMESRV
from pocketmq.wire.tls import ClientTls, TlsFileError

T = TypeVar("T")
Command = Callable[..., None]

DEFAULT_TIMEOUT = 5.0


class Access(enum.StrEnum):
    auto = "auto"
    relay = "relay"
    direct = "direct"


class StartFrom(enum.StrEnum):
    first = "first"
    last = "last"
    timestamp = "timestamp"


class FailedError(typer.Exit):
    """Ends a command with exit code 1 after its output was printed."""

    def __init__(self) -> None:
        super().__init__(1)


def _option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _access(default: Access, text: str) -> inspect.Parameter:
    return _option("access", Annotated[Access, typer.Option(
        "--access", envvar="POCKETMQ_ACCESS", case_sensitive=False, help=text)], default)


# -- the shared options -----------------------------------------------------------------------
# Targets a command may take (passed to `connected`), in the order they are listed in its help.

CLUSTER = _option("cluster", Annotated[str | None, typer.Option(
    "--cluster", "-c", help="Only this cluster's brokers.")], None)
BROKER = _option("broker", Annotated[str | None, typer.Option(
    "--broker", "-b", help="Talk to this one broker (host:port) directly instead of via the NameServer.")],
    None)
# Admin calls go through the NameServer's relay unless it has none; sending and consuming talk to
# the brokers directly unless told otherwise.
ACCESS = _access(Access.auto, "How broker calls travel: relay (through the NameServer only), direct (to "
                              "broker addresses), auto (relay, direct if the NameServer has no relay).")
CLIENT_ACCESS = _access(Access.direct, "direct (default), relay or auto.")

# Every command ends with these three.
_NAMESRV = _option("namesrv", Annotated[str, typer.Option(
    "--namesrv", "-n", envvar="POCKETMQ_NAMESRV", help="NameServer address(es), host:port[;host:port].")],
    DEFAULT_NAMESRV)
_OUTPUT = _option("output", Annotated[Output, typer.Option(
    "--output", "-o", envvar="POCKETMQ_OUTPUT", case_sensitive=False, help="table or json.")], Output.table)
_TIMEOUT = Annotated[float, typer.Option("--timeout", min=0.1, help="Per-call timeout in seconds.")]
# TLS (the cluster's gRPC ports speak TLS when it runs with tlsEnable=true).
_TLS = _option("tls", Annotated[bool, typer.Option(
    "--tls/--no-tls", envvar="POCKETMQ_TLS", help="Connect with TLS (implied by --ca-file).")], False)
_CA_FILE = _option("ca_file", Annotated[str, typer.Option(
    "--ca-file", envvar="POCKETMQ_TLS_CA_FILE",
    help="PEM CA certificate(s) to verify the servers with (default: the system's roots).")], "")
_CERT_FILE = _option("cert_file", Annotated[str, typer.Option(
    "--cert-file", envvar="POCKETMQ_TLS_CERT_FILE", help="Client certificate (PEM) for mutual TLS.")], "")
_KEY_FILE = _option("key_file", Annotated[str, typer.Option(
    "--key-file", envvar="POCKETMQ_TLS_KEY_FILE", help="Key of --cert-file (PEM).")], "")
_SERVER_NAME = _option("tls_server_name", Annotated[str, typer.Option(
    "--tls-server-name", envvar="POCKETMQ_TLS_SERVER_NAME",
    help="Name to check the servers' certificates for (servers reached by IP).")], "")


@dataclasses.dataclass(frozen=True)
class Conn:
    """The shared options of one command invocation."""

    namesrv: str = DEFAULT_NAMESRV
    output: Output = Output.table
    timeout: float = DEFAULT_TIMEOUT
    cluster: str | None = None
    broker: str | None = None
    access: Access = Access.auto
    tls: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    tls_server_name: str = ""

    @property
    def json(self) -> bool:
        return self.output is Output.json

    @property
    def client_tls(self) -> ClientTls | bool:
        """The clients' ``tls`` argument: TLS with the given files, or plaintext (False)."""
        if not (self.tls or self.ca_file or self.cert_file):
            return False
        try:
            return ClientTls(ca_file=self.ca_file, cert_file=self.cert_file, key_file=self.key_file,
                             server_name=self.tls_server_name)
        except TlsFileError as exc:
            raise typer.BadParameter(str(exc)) from None

    def admin(self) -> Any:
        from pocketmq.client.admin import AsyncAdmin

        return AsyncAdmin(self.namesrv, broker=self.broker, relay=self.access.value, timeout=self.timeout,
                          tls=self.client_tls)

    def run(self, coro_fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
        return run_command(coro_fn, self.output)

    def call(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        """``fn(admin)`` with an admin client that is closed again before this returns."""

        async def go() -> T:
            async with self.admin() as admin:
                return await fn(admin)

        return self.run(go)


def connected(*targets: inspect.Parameter, timeout: float = DEFAULT_TIMEOUT) -> Callable[[Command], Command]:
    """Add the shared options to a command: ``targets`` (some of CLUSTER, BROKER, ACCESS,
    CLIENT_ACCESS), then ``--namesrv``, ``--output`` and ``--timeout`` (default ``timeout``), after
    the command's own. The command takes them as one keyword argument ``conn: Conn``. Apply it
    below the ``@<group>.command(...)`` decorator."""
    shared = [*targets, _NAMESRV, _OUTPUT, _option("timeout", _TIMEOUT, timeout),
              _TLS, _CA_FILE, _CERT_FILE, _KEY_FILE, _SERVER_NAME]
    names = [p.name for p in shared]
    if len(set(names)) != len(names):
        raise TypeError(f"an option given twice among {names}")

    def decorate(fn: Command) -> Command:
        signature = inspect.signature(fn, eval_str=True)
        if "conn" not in signature.parameters:
            raise TypeError(f"{fn.__name__} must take a 'conn' argument")
        own = [p for p in signature.parameters.values() if p.name != "conn"]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> None:
            conn = Conn(**{name: kwargs.pop(name) for name in names})
            fn(**kwargs, conn=conn)

        # typer reads the options from the signature (and the help from the docstring).
        command.__signature__ = signature.replace(parameters=[*own, *shared])  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in [*own, *shared]} | {"return": None}
        return command

    return decorate


def run_command(coro_fn: Callable[[], Coroutine[Any, Any, T]], output: Output) -> T:
    """Run one command's coroutine; PocketMQ errors end it with exit code 1."""
    logging.basicConfig(level=os.environ.get("POCKETMQ_LOG_LEVEL", "WARNING").upper(),
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return asyncio.run(coro_fn())
    except PocketMQError as exc:
        _print_error(exc, output)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _print_error(exc: PocketMQError, output: Output) -> None:
    if output is Output.json:
        print_json({"error": exc.to_dict()})
    else:
        stderr_console().print(f"[red]error:[/red] {type(exc).__name__}: {exc}", markup=True)


def results_rows(results: list[Any], value_key: str | None = None) -> tuple[list[dict[str, Any]], bool]:
    """BrokerResult list -> JSON rows (each successful value under ``value_key``, as a dict) and
    whether all succeeded."""
    rows = []
    ok = True
    for r in results:
        row: dict[str, Any] = {"cluster": r.target.cluster, "broker_name": r.target.broker_name,
                               "broker_id": r.target.broker_id, "addr": r.target.addr, "ok": r.ok}
        if r.error is not None:
            ok = False
            row["error"] = r.error.to_dict()
        if value_key is not None and r.value is not None:
            row[value_key] = proto_dict(r.value)
        rows.append(row)
    return rows, ok
