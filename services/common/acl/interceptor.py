"""The gRPC server interceptor enforcing the ACL: authenticates each call's signature, looks the
method up in :data:`services.common.acl.rules.RULES` and checks the request's resources against
the caller's policies before the servicer runs.

Denials: ``pocketmq.*.v1`` calls end with UNAUTHENTICATED (no or bad credentials) or
PERMISSION_DENIED; ``apache.rocketmq.v2`` calls end OK with the v2 status UNAUTHORIZED or
FORBIDDEN in the response, as RocketMQ's proxy answers. The message names the action and the
resource the request asked for, never whether it exists. Every denial is counted
(``pocketmq_acl_denied_total``) and logged with the access key and peer address.
"""

from __future__ import annotations

import functools
import inspect
import ipaddress
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, Counter

from apache.rocketmq.v2 import definition_pb2, service_pb2
from services.common.acl.authn import AuthenticationError, Authenticator, auth_headers
from services.common.acl.model import Action, User, UserType, decide
from services.common.acl.rules import PUBLIC_SERVICES, RULES, Requirement, Rule

log = logging.getLogger(__name__)

V2_PREFIX = "/apache.rocketmq.v2."
_V2_METHODS = service_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name
_UNAUTHORIZED = definition_pb2.Code.UNAUTHORIZED
_FORBIDDEN = definition_pb2.Code.FORBIDDEN

IP = ipaddress.IPv4Address | ipaddress.IPv6Address


@functools.lru_cache(maxsize=4096)
def peer_ip(peer: str) -> IP | None:
    """``ipv4:1.2.3.4:5678`` / ``ipv6:[::1]:5678`` -> the address; None for anything else."""
    kind, _, rest = peer.partition(":")
    try:
        if kind == "ipv4":
            return ipaddress.IPv4Address(rest.rpartition(":")[0])
        if kind == "ipv6":
            return ipaddress.IPv6Address(rest.rpartition(":")[0].strip("[]"))
    except ValueError:
        return None
    return None


class AclDeniedError(Exception):
    def __init__(self, authenticated: bool, message: str) -> None:
        super().__init__(message)
        self.authenticated = authenticated
        self.message = message


class AclMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.denied = Counter("pocketmq_acl_denied", "Requests refused by the ACL",
                              ["method", "reason"], registry=registry)


def _actions_text(actions: tuple[Action, ...]) -> str:
    return "|".join(a.value for a in actions)


class AclInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """``cluster_name``: the name Cluster resources of this server's calls carry (a broker's
    cluster; ``*`` on a NameServer, which serves every cluster: ``Cluster:*`` grants it)."""

    def __init__(self, authenticator: Authenticator, cluster_name: str,
                 registry: CollectorRegistry | None = None) -> None:
        self.authenticator = authenticator
        self.cluster_name = cluster_name
        self.metrics = AclMetrics(registry)
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method: str = details.method
        cached = self._handlers.get(method)
        if cached is not None:
            return cached
        handler = await continuation(details)
        if handler is None or method.split("/")[1] in PUBLIC_SERVICES:
            return handler
        wrapped = self._wrap(method, handler)
        self._handlers[method] = wrapped
        return wrapped

    # -- decisions --------------------------------------------------------------------------

    def caller(self, context: grpc.aio.ServicerContext) -> User | None:
        """The authenticated user of the call (None: unsigned); raises AclDeniedError for bad credentials."""
        authorization, date_time = auth_headers(context.invocation_metadata())
        try:
            return self.authenticator.authenticate(authorization, date_time)
        except AuthenticationError as exc:
            raise AclDeniedError(False, f"authentication failed: {exc}") from None

    def authorize(self, rule: Rule | None, method: str, user: User | None, request: Any,
                  peer: str) -> None:
        """Raise AclDeniedError unless ``user`` may make this call."""
        if rule is None:
            raise AclDeniedError(user is not None, f"{method} declares no permission and is refused")
        if rule.kind == "relay" or (user is not None and user.user_type is UserType.SUPER):
            return
        who = f"user {user.access_key!r}" if user is not None else "unauthenticated caller"
        if rule.kind == "super":
            raise AclDeniedError(user is not None, f"permission denied: {who} is not a Super user "
                                                   f"({method.rsplit('/', 1)[1]} is for Super users only)")
        if rule.kind == "broker":
            if user is None or user.user_type is not UserType.BROKER:
                raise AclDeniedError(user is not None, f"permission denied: {who} is not a broker user "
                                               f"({method.rsplit('/', 1)[1]} is for brokers only)")
            return
        policies = user.policies if user is not None else self.authenticator.store.current().default_policies
        if rule.kind == "authenticated":
            if user is None and not policies:
                raise AclDeniedError(False, "authentication required: sign requests with an "
                                            "AccessKey/SecretKey")
            return
        assert rule.extract is not None
        requirements: list[Requirement] = rule.extract(request, self.cluster_name)
        ip = peer_ip(peer) if any(p.networks for p in policies) else None
        reader = user is not None and user.user_type is UserType.BROKER
        for resource, actions in requirements:
            # Broker users read everything (a broker answers v2 QueryRoute from the NameServer on
            # behalf of clients it has already authorised); anything else needs their policies.
            if reader and (Action.GET in actions or Action.LIST in actions):
                continue
            if not decide(policies, resource, actions, ip):
                hint = "" if user is not None else " (sign requests with an AccessKey/SecretKey)"
                raise AclDeniedError(user is not None,
                             f"permission denied: {who} may not {_actions_text(actions)} {resource}{hint}")

    def _record(self, method: str, denied: AclDeniedError, user: User | None, peer: str) -> None:
        reason = "forbidden" if denied.authenticated else "unauthenticated"
        self.metrics.denied.labels(method, reason).inc()
        log.warning("request denied", extra={
            "method": method, "reason": reason, "user": user.access_key if user is not None else "-",
            "peer": peer, "detail": denied.message})

    def _v2_denial(self, method: str, denied: AclDeniedError) -> Any:
        name = method.rsplit("/", 1)[1]
        response_type = getattr(service_pb2, _V2_METHODS[name].output_type.name)
        code = _FORBIDDEN if denied.authenticated else _UNAUTHORIZED
        return response_type(status=definition_pb2.Status(code=code, message=denied.message))

    async def _deny_v1(self, context: grpc.aio.ServicerContext, denied: AclDeniedError) -> None:
        code = grpc.StatusCode.PERMISSION_DENIED if denied.authenticated else grpc.StatusCode.UNAUTHENTICATED
        await context.abort(code, denied.message)

    # -- handler wrapping -------------------------------------------------------------------

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        rule = RULES.get(method)
        v2 = method.startswith(V2_PREFIX)
        gate = self

        def check(request: Any, context: grpc.aio.ServicerContext) -> AclDeniedError | None:
            user: User | None = None
            peer = context.peer() or ""
            try:
                user = gate.caller(context)
                gate.authorize(rule, method, user, request, peer)
            except AclDeniedError as denied:
                gate._record(method, denied, user, peer)
                return denied
            return None

        kwargs = {"request_deserializer": handler.request_deserializer,
                  "response_serializer": handler.response_serializer}
        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                denied = check(request, context)
                if denied is not None:
                    if v2:
                        return gate._v2_denial(method, denied)
                    await gate._deny_v1(context, denied)
                result = inner_uu(request, context)
                return await result if inspect.isawaitable(result) else result

            return grpc.unary_unary_rpc_method_handler(unary_unary, **kwargs)
        if handler.unary_stream is not None:
            inner_us = handler.unary_stream

            async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                denied = check(request, context)
                if denied is not None:
                    if v2:
                        yield gate._v2_denial(method, denied)
                        return
                    await gate._deny_v1(context, denied)
                result = inner_us(request, context)
                if hasattr(result, "__aiter__"):
                    async for item in result:
                        yield item
                else:
                    await result

            return grpc.unary_stream_rpc_method_handler(unary_stream, **kwargs)
        streaming = handler.stream_stream if handler.stream_stream is not None else handler.stream_unary
        assert streaming is not None

        async def checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext,
                          first_checked: bool) -> AsyncIterator[Any]:
            first = True
            async for request in requests:
                if rule is not None and rule.per_message and not (first and first_checked):
                    denied = check(request, context)
                    if denied is not None:
                        # Raised, not aborted here: a handler may read its requests in another
                        # task than the one writing its replies, and an abort from there would
                        # race a reply being written. The wrapper aborts from the call's own
                        # task once the handler has answered what came before.
                        raise denied
                first = False
                yield request

        if handler.stream_stream is not None:
            inner_ss = handler.stream_stream

            async def stream_stream(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext,
                                    ) -> AsyncIterator[Any]:
                if rule is None or not rule.per_message:
                    denied = check(None, context)
                    if denied is not None:
                        if v2:
                            yield gate._v2_denial(method, denied)
                            return
                        await gate._deny_v1(context, denied)
                result = inner_ss(checked(requests, context, False), context)
                try:
                    if hasattr(result, "__aiter__"):
                        async for item in result:
                            yield item
                    else:
                        await result
                except AclDeniedError as denied:
                    await gate._deny_v1(context, denied)

            return grpc.stream_stream_rpc_method_handler(stream_stream, **kwargs)
        inner_su = handler.stream_unary

        async def stream_unary(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            if rule is None or not rule.per_message:
                denied = check(None, context)
                if denied is not None:
                    await gate._deny_v1(context, denied)
            result = inner_su(checked(requests, context, False), context)
            try:
                return await result if inspect.isawaitable(result) else result
            except AclDeniedError as denied:
                await gate._deny_v1(context, denied)
                raise  # (abort raises; for the type checker)

        return grpc.stream_unary_rpc_method_handler(stream_unary, **kwargs)
