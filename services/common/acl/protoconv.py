"""ACL users and policies <-> their protobuf messages (``pocketmq.common.v1.AclUser`` ...):
the broker's ACL admin RPCs and table sync, and the tables brokers register with NameServers."""

from __future__ import annotations

from collections.abc import Iterable

from pocketmq.common.v1 import common_pb2
from services.common.acl.model import AclDocument, AclFormatError, Policy, User
from services.common.errors import InvalidArgumentError


def policy_from_proto(msg: common_pb2.AclPolicy, where: str) -> Policy:
    try:
        return Policy.from_json({"resource": msg.resource, "actions": list(msg.actions),
                                 "decision": "Deny" if msg.deny else "Allow",
                                 "sourceIps": list(msg.source_ips)}, where)
    except AclFormatError as exc:
        raise InvalidArgumentError(str(exc)) from None


def policy_to_proto(policy: Policy) -> common_pb2.AclPolicy:
    return common_pb2.AclPolicy(resource=str(policy.resource),
                                actions=sorted(a.value for a in policy.actions),
                                deny=not policy.allow, source_ips=[str(n) for n in policy.networks])


def user_to_proto(user: User, *, with_secret: bool) -> common_pb2.AclUser:
    return common_pb2.AclUser(access_key=user.access_key, secret_key=user.secret_key if with_secret else "",
                              user_type=user.user_type.value,
                              policies=[policy_to_proto(p) for p in user.policies])


def user_from_proto(msg: common_pb2.AclUser) -> User:
    doc = {"accessKey": msg.access_key, "secretKey": msg.secret_key, "userType": msg.user_type or "Normal",
           "policies": []}
    try:
        user = User.from_json(doc, "user")
    except AclFormatError as exc:
        raise InvalidArgumentError(str(exc)) from None
    policies = tuple(policy_from_proto(p, f"user {user.access_key} policy {i}")
                     for i, p in enumerate(msg.policies))
    return User(user.access_key, user.secret_key, user.user_type, policies)


def table_to_proto(users: Iterable[User], version: common_pb2.DataVersion, *,
                   with_secrets: bool) -> common_pb2.AclTable:
    return common_pb2.AclTable(data_version=version,
                               users=[user_to_proto(u, with_secret=with_secrets) for u in users])


def document_from_proto(table: common_pb2.AclTable) -> AclDocument:
    """The users of a table (InvalidArgumentError naming the entry at fault)."""
    return AclDocument({u.access_key: u for u in (user_from_proto(m) for m in table.users)})
