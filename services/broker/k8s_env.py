"""Container entry point of broker pods: StatefulSet ordinal -> brokerId and brokerRole.

    python -m services.broker.k8s_env python -m services.broker -c /etc/pocketmq/broker.conf

A broker group runs as one StatefulSet; its pod ``<statefulset>-<ordinal>`` is brokerId
``<ordinal>``. Ordinal 0 keeps the role written in broker.conf (the group's master role), every
other ordinal runs as SLAVE. Under a failover controller (``POCKETMQ_CONTROLLER_MODE`` etcd or
kubernetes) the pod is member ``<ordinal> + 1`` (member ids are > 0) and keeps the master role,
which it takes whenever it holds the group's lease. This module reads the pod name (``POD_NAME``
from the downward API, else ``HOSTNAME``), sets ``POCKETMQ_BROKER_ID`` (and ``POCKETMQ_BROKER_ROLE=SLAVE`` for
ordinals > 0), which override broker.conf, logs one line, and replaces itself with the command
that follows (``os.execvpe``), so the broker is the container's main process and receives
SIGTERM directly.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
from collections.abc import Callable, Mapping, Sequence

from services.common.logs import setup_logging

log = logging.getLogger(__name__)

BROKER_ID_ENV = "POCKETMQ_BROKER_ID"
BROKER_ROLE_ENV = "POCKETMQ_BROKER_ROLE"
CONTROLLER_MODE_ENV = "POCKETMQ_CONTROLLER_MODE"
SLAVE_ROLE = "SLAVE"
_ORDINAL = re.compile(r"^(?P<set>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)-(?P<ordinal>0|[1-9][0-9]*)$")

Exec = Callable[[str, list[str], dict[str, str]], object]


class PodNameError(ValueError):
    """The pod name does not end in a StatefulSet ordinal."""


def pod_ordinal(pod_name: str) -> int:
    """``"pocketmq-broker-a-2"`` -> 2. Raises PodNameError for names without an ordinal suffix."""
    match = _ORDINAL.match(pod_name)
    if match is None:
        raise PodNameError(
            f"pod name {pod_name!r} does not end in a StatefulSet ordinal (<statefulset>-<n>); "
            "broker pods must run in a StatefulSet"
        )
    return int(match.group("ordinal"))


def pod_name_from(environ: Mapping[str, str]) -> str:
    return environ.get("POD_NAME") or environ.get("HOSTNAME") or socket.gethostname()


def broker_environment(pod_name: str, controller_mode: str = "none") -> dict[str, str]:
    """The variables that make the pod ``pod_name`` its group's master (ordinal 0) or a slave,
    or, under a controller, member ``ordinal + 1``."""
    ordinal = pod_ordinal(pod_name)
    if controller_mode not in ("", "none"):
        return {BROKER_ID_ENV: str(ordinal + 1)}
    env = {BROKER_ID_ENV: str(ordinal)}
    if ordinal > 0:
        env[BROKER_ROLE_ENV] = SLAVE_ROLE
    return env


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None,
         execvpe: Exec | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    source = dict(os.environ if environ is None else environ)
    if not args:
        print("usage: python -m services.broker.k8s_env COMMAND [ARG...]", file=sys.stderr)
        return 2
    pod_name = pod_name_from(source)
    try:
        derived = broker_environment(pod_name, source.get(CONTROLLER_MODE_ENV, "none"))
    except PodNameError as exc:
        log.error("cannot derive brokerId", extra={"error": str(exc)})
        return 2
    for key, value in derived.items():
        if key in source and source[key] != value:
            log.warning("overriding environment variable with the pod's ordinal",
                        extra={"variable": key, "was": source[key], "now": value})
    env = {**source, **derived}
    log.info("broker identity from pod ordinal",
             extra={"pod": pod_name, "brokerId": derived[BROKER_ID_ENV],
                    "brokerRole": derived.get(BROKER_ROLE_ENV, "from broker.conf (master role)"),
                    "exec": " ".join(args)})
    for handler in logging.getLogger().handlers:
        handler.flush()
    try:
        (execvpe or os.execvpe)(args[0], args, env)
    except OSError as exc:
        log.error("cannot start the broker", extra={"command": args[0], "error": exc.strerror})
        return 127
    return 0


if __name__ == "__main__":
    setup_logging("broker")
    sys.exit(main())
