"""The broker group's ACL table (``acl.json``): users managed with ``pocketmq acl`` (the Broker
service's ACL admin RPCs on the master), versioned and synced to slaves like the other tables.
Users of the ``aclConfigFile`` are not in it (the file wins for an access key in both)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pocketmq.common.v1 import common_pb2
from services.broker.metadata.base import DataVersion, MetadataTable
from services.common.acl.model import AclDocument, Policy, User
from services.common.acl.protoconv import table_to_proto
from services.common.errors import NotFoundError


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

    def to_proto(self, *, with_secrets: bool = True) -> common_pb2.AclTable:
        return table_to_proto(self.all(), self.data_version.to_proto(), with_secrets=with_secrets)

    def replace_all(self, users: list[User], version: DataVersion) -> None:
        self._users = {u.access_key: u for u in users}
        self.replace_version(version)
        self._notify()


__all__ = ["AclTableManager"]
