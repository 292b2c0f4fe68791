"""Request metadata and resource names of the RocketMQ 5 API.

A client names a topic or group as a ``Resource{resource_namespace, name}``; the namespace may
also come from the ``x-mq-namespace`` header. As in RocketMQ, a namespaced resource is stored
under ``<namespace>%<name>`` (retry and dead-letter names keep their prefix in front:
``%RETRY%<namespace>%<group>``), and routes and messages sent back to the client carry the
plain name with the namespace beside it. Pure functions; errors are :class:`V2Error` with the
code RocketMQ's proxy uses for the resource.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import NamedTuple

from apache.rocketmq.v2 import definition_pb2
from services.broker import validation as v
from services.broker.v2.status import Code, V2Error
from services.common.errors import InvalidArgumentError

CLIENT_ID_HEADER = "x-mq-client-id"
NAMESPACE_HEADER = "x-mq-namespace"
LANGUAGE_HEADER = "x-mq-language"
VERSION_HEADER = "x-mq-client-version"
#: Separator between a namespace and a resource name (RocketMQ's NamespaceUtil).
NAMESPACE_SEPARATOR = "%"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
#: A namespace (RocketMQ instance id): letters, digits, ``_`` and ``-``; never the separator.
_NAMESPACE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_CLIENT_ID_LENGTH = 256
_HEADERS = frozenset({CLIENT_ID_HEADER, NAMESPACE_HEADER, LANGUAGE_HEADER, VERSION_HEADER})


class RequestMeta(NamedTuple):
    """What the request headers say about the caller (a tuple: built for every call, where a
    frozen dataclass costs twice as much to build)."""

    client_id: str = ""
    namespace: str = ""
    language: str = ""
    version: str = ""

    @classmethod
    def from_metadata(cls, metadata: Iterable[tuple[str, str | bytes]] | None) -> RequestMeta:
        client_id = namespace = language = version = ""
        for key, value in metadata or ():
            if key in _HEADERS:
                text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
                if key == CLIENT_ID_HEADER:
                    client_id = text
                elif key == NAMESPACE_HEADER:
                    namespace = text
                elif key == LANGUAGE_HEADER:
                    language = text
                else:
                    version = text
        return cls(client_id, namespace, language, version)

    def require_client_id(self) -> str:
        if not self.client_id:
            raise V2Error(Code.CLIENT_ID_REQUIRED,
                          f"the {CLIENT_ID_HEADER} request header is required for this call")
        if len(self.client_id) > MAX_CLIENT_ID_LENGTH:
            raise V2Error(Code.CLIENT_ID_REQUIRED,
                          f"{CLIENT_ID_HEADER} is {len(self.client_id)} characters "
                          f"(at most {MAX_CLIENT_ID_LENGTH})")
        return self.client_id


def namespace_of(resource: definition_pb2.Resource, meta: RequestMeta, code: int) -> str:
    """The resource's namespace: ``resource_namespace``, else the header's; validated."""
    return _namespace(resource.resource_namespace, meta.namespace, resource.name, code)


def _namespace(ns: str, header: str, name: str, code: int) -> str:
    if ns and header and ns != header:
        raise V2Error(code, f"resource {name!r} names namespace {ns!r} but the "
                            f"{NAMESPACE_HEADER} header says {header!r}")
    ns = ns or header
    if ns and not _NAMESPACE.match(ns):
        raise V2Error(code, f"namespace {ns!r} is malformed (1..64 letters, digits, _ or -; "
                            f"'{NAMESPACE_SEPARATOR}' separates it from the name)")
    return ns


def wrap(namespace: str, name: str) -> str:
    """``name`` inside ``namespace`` (RocketMQ's NamespaceUtil.wrapNamespace)."""
    if not namespace:
        return name
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if name.startswith(prefix):
            return f"{prefix}{namespace}{NAMESPACE_SEPARATOR}{name[len(prefix):]}"
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}"


def unwrap(namespace: str, stored: str) -> str:
    """The client-facing name of a stored name (inverse of :func:`wrap`)."""
    if not namespace:
        return stored
    inner = f"{namespace}{NAMESPACE_SEPARATOR}"
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if stored.startswith(prefix + inner):
            return prefix + stored[len(prefix) + len(inner):]
    return stored[len(inner):] if stored.startswith(inner) else stored


def topic_name(resource: definition_pb2.Resource, meta: RequestMeta) -> str:
    """The stored name of a topic a client may use; ILLEGAL_TOPIC when malformed."""
    return _topic_name(resource.resource_namespace, meta.namespace, resource.name)


@functools.lru_cache(maxsize=1024)
def _topic_name(resource_ns: str, header_ns: str, topic: str) -> str:
    # Pure and called for every send: valid names are cached (a refused one raises, uncached).
    ns = _namespace(resource_ns, header_ns, topic, Code.ILLEGAL_TOPIC)
    if not topic:
        raise V2Error(Code.ILLEGAL_TOPIC, "topic name must not be empty")
    if NAMESPACE_SEPARATOR in topic and ns:
        raise V2Error(Code.ILLEGAL_TOPIC, f"topic name {topic!r} must not contain "
                                          f"'{NAMESPACE_SEPARATOR}' inside namespace {ns!r}")
    name = wrap(ns, topic)
    try:
        v.validate_send_topic(name)
    except InvalidArgumentError as exc:
        raise V2Error(Code.ILLEGAL_TOPIC, str(exc)) from None
    return name


def group_name(resource: definition_pb2.Resource, meta: RequestMeta) -> str:
    """The stored name of a consumer group; ILLEGAL_CONSUMER_GROUP when malformed."""
    ns = namespace_of(resource, meta, Code.ILLEGAL_CONSUMER_GROUP)
    if not resource.name:
        raise V2Error(Code.ILLEGAL_CONSUMER_GROUP, "consumer group name must not be empty")
    name = wrap(ns, resource.name)
    try:
        v.validate_group(name)
    except InvalidArgumentError as exc:
        raise V2Error(Code.ILLEGAL_CONSUMER_GROUP, str(exc)) from None
    return name


def client_resource(namespace: str, stored: str) -> definition_pb2.Resource:
    """The Resource a client expects for a stored name."""
    return definition_pb2.Resource(resource_namespace=namespace, name=unwrap(namespace, stored))
