"""The broker group's ACL table (``acl.json``): users managed with ``pocketmq acl`` (the Broker
service's ACL admin RPCs on the master), versioned and synced to slaves like the other tables.
Users of the ``aclConfigFile`` are not in it (the file wins for an access key in both)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pocketmq.broker.v1 import broker_pb2
from services.broker.metadata.base import DataVersion, MetadataTable
from services.common.acl.model import AclDocument, AclFormatError, Policy, User, UserType
from services.common.errors import InvalidArgumentError, NotFoundError


def policy_from_proto(msg: broker_pb2.AclPolicy, where: str) -> Policy:
    try:
        return Policy.from_json({"resource": msg.resource, "actions": list(msg.actions),
                                 "decision": "Deny" if msg.deny else "Allow",
                                 "sourceIps": list(msg.source_ips)}, where)
    except AclFormatError as exc:
        raise InvalidArgumentError(str(exc)) from None


def policy_to_proto(policy: Policy) -> broker_pb2.AclPolicy:
    return broker_pb2.AclPolicy(resource=str(policy.resource),
                                actions=sorted(a.value for a in policy.actions),
                                deny=not policy.allow, source_ips=[str(n) for n in policy.networks])


def user_to_proto(user: User, *, with_secret: bool) -> broker_pb2.AclUser:
    return broker_pb2.AclUser(access_key=user.access_key, secret_key=user.secret_key if with_secret else "",
                              user_type=user.user_type.value,
                              policies=[policy_to_proto(p) for p in user.policies])


def user_from_proto(msg: broker_pb2.AclUser) -> User:
    doc = {"accessKey": msg.access_key, "secretKey": msg.secret_key, "userType": msg.user_type or "Normal",
           "policies": []}
    try:
        user = User.from_json(doc, "user")
    except AclFormatError as exc:
        raise InvalidArgumentError(str(exc)) from None
    policies = tuple(policy_from_proto(p, f"user {user.access_key} policy {i}")
                     for i, p in enumerate(msg.policies))
    return User(user.access_key, user.secret_key, user.user_type, policies)


class AclTableManager(MetadataTable):
    file_name = "acl.json"

    def __init__(self, config_dir: str) -> None:
        super().__init__(config_dir)
        self._users: dict[str, User] = {}
        #: Called after every change (the broker's ACL store re-reads the table).
        self.listeners: list[Callable[[], None]] = []

    def encode_table(self) -> dict[str, Any]:
        return {"users": [u.to_json() for u in self._users.values()]}

    def decode_table(self, doc: dict[str, Any]) -> None:
        self._users = dict(AclDocument.from_json({"users": doc.get("users", [])}, str(self.path)).users)
        self._notify()

    def _notify(self) -> None:
        for listener in self.listeners:
            listener()

    def document(self) -> AclDocument:
        return AclDocument(dict(self._users))

    def all(self) -> list[User]:
        return list(self._users.values())

    def get(self, access_key: str) -> User:
        user = self._users.get(access_key)
        if user is None:
            raise NotFoundError(f"ACL user {access_key!r} does not exist in this broker group's ACL table")
        return user

    def put(self, user: User) -> User:
        self._users[user.access_key] = user
        self.changed()
        self._notify()
        return user

    def delete(self, access_key: str) -> None:
        self.get(access_key)
        del self._users[access_key]
        self.changed()
        self._notify()

    def put_policy(self, access_key: str, policy: Policy) -> User:
        user = self.get(access_key)
        kept = tuple(p for p in user.policies if p.resource != policy.resource)
        return self.put(User(user.access_key, user.secret_key, user.user_type, (*kept, policy)))

    def delete_policy(self, access_key: str, resource: str) -> User:
        user = self.get(access_key)
        kept = tuple(p for p in user.policies if str(p.resource) != resource.strip())
        if len(kept) == len(user.policies):
            raise NotFoundError(f"ACL user {access_key!r} has no policy for {resource!r}")
        return self.put(User(user.access_key, user.secret_key, user.user_type, kept))

    def replace_all(self, users: list[User], version: DataVersion) -> None:
        self._users = {u.access_key: u for u in users}
        self.replace_version(version)
        self._notify()


__all__ = ["AclTableManager", "UserType", "policy_from_proto", "user_from_proto", "user_to_proto"]
