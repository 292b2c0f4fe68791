"""The ACL data model: users, resource patterns, policies and the allow/deny decision, parsed
from the JSON document of an ACL file (``aclConfigFile``) or the broker's ACL metadata table.

Document::

    {"users": [{"accessKey": "app", "secretKey": "...", "userType": "Normal",
                "policies": [{"resource": "Topic:orders*", "actions": ["Pub", "Sub"],
                              "decision": "Allow", "sourceIps": ["10.0.0.0/8"]}]}],
     "defaultPolicies": [{"resource": "Topic:public-*", "actions": ["Sub"], "decision": "Allow"}]}

``userType``: ``Super`` (every action), ``Broker`` (registers with NameServers, syncs
metadata and reads (Get, List) everything, plus its policies) or ``Normal`` (only its
policies). ``defaultPolicies`` apply to unauthenticated callers. A resource is
``<Type>:<name>``, ``<Type>:<prefix>*``, ``<Type>:*`` or ``*``; types are Topic, Group,
Cluster.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AclFormatError(ValueError):
    """An ACL document that cannot be used (the message names the entry at fault)."""


class Action(enum.Enum):
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"


ALL_ACTIONS = frozenset(Action)


class ResourceType(enum.Enum):
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"


class UserType(enum.Enum):
    SUPER = "Super"
    BROKER = "Broker"
    NORMAL = "Normal"


@dataclasses.dataclass(frozen=True)
class Resource:
    """A concrete resource a request touches."""

    type: ResourceType
    name: str

    def __str__(self) -> str:
        return f"{self.type.value}:{self.name}"


@dataclasses.dataclass(frozen=True)
class ResourcePattern:
    """``type`` None = any type; ``name`` with ``prefix`` True matches names starting with it."""

    type: ResourceType | None
    name: str
    prefix: bool

    @classmethod
    def parse(cls, text: str) -> ResourcePattern:
        text = text.strip()
        if text == "*":
            return cls(None, "", True)
        type_text, sep, name = text.partition(":")
        types = {t.value.lower(): t for t in ResourceType}
        if not sep or type_text.lower() not in types:
            raise AclFormatError(f"resource {text!r}: expected Topic:<name>, Group:<name>, Cluster:<name> "
                                 "(a trailing * matches a prefix) or *")
        if not name or "*" in name[:-1]:
            raise AclFormatError(f"resource {text!r}: a name, optionally ending in *, is required")
        if name.endswith("*"):
            return cls(types[type_text.lower()], name[:-1], True)
        return cls(types[type_text.lower()], name, False)

    def matches(self, resource: Resource) -> bool:
        if self.type is not None and self.type is not resource.type:
            return False
        return resource.name.startswith(self.name) if self.prefix else resource.name == self.name

    @property
    def specificity(self) -> tuple[int, int]:
        """Literal beats prefix, a longer prefix beats a shorter one, any type comes last."""
        return (2 if not self.prefix else (1 if self.type is not None else 0), len(self.name))

    def __str__(self) -> str:
        if self.type is None:
            return "*"
        return f"{self.type.value}:{self.name}{'*' if self.prefix else ''}"


@dataclasses.dataclass(frozen=True)
class Policy:
    resource: ResourcePattern
    actions: frozenset[Action]
    allow: bool
    networks: tuple[IPNetwork, ...] = ()

    def applies(self, resource: Resource, action: Action, ip: IPAddress | None) -> bool:
        if action not in self.actions or not self.resource.matches(resource):
            return False
        if self.networks:
            return ip is not None and any(ip.version == n.version and ip in n for n in self.networks)
        return True

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "resource": str(self.resource),
            "actions": sorted(a.value for a in self.actions),
            "decision": "Allow" if self.allow else "Deny",
        }
        if self.networks:
            doc["sourceIps"] = [str(n) for n in self.networks]
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Policy:
        if not isinstance(doc, Mapping):
            raise AclFormatError(f"{where}: a policy must be an object")
        resource = ResourcePattern.parse(str(doc.get("resource", "")))
        raw_actions = doc.get("actions", [])
        if isinstance(raw_actions, str):
            raw_actions = [a for a in raw_actions.replace(",", " ").split() if a]
        actions: set[Action] = set()
        by_name = {a.value.lower(): a for a in Action}
        for name in raw_actions:
            if str(name).lower() == "all":
                actions |= ALL_ACTIONS
            elif str(name).lower() in by_name:
                actions.add(by_name[str(name).lower()])
            else:
                raise AclFormatError(f"{where}: unknown action {name!r} (expected one of "
                                     f"{', '.join(a.value for a in Action)}, All)")
        if not actions:
            raise AclFormatError(f"{where}: at least one action is required")
        decision = str(doc.get("decision", "Allow")).lower()
        if decision not in ("allow", "deny"):
            raise AclFormatError(f"{where}: decision must be Allow or Deny")
        networks = []
        for cidr in doc.get("sourceIps", []) or []:
            try:
                networks.append(ipaddress.ip_network(str(cidr), strict=False))
            except ValueError:
                raise AclFormatError(f"{where}: invalid sourceIps entry {cidr!r}") from None
        return cls(resource, frozenset(actions), decision == "allow", tuple(networks))


@dataclasses.dataclass(frozen=True)
class User:
    access_key: str
    secret_key: str = dataclasses.field(repr=False)
    user_type: UserType = UserType.NORMAL
    policies: tuple[Policy, ...] = ()

    def to_json(self, *, with_secret: bool = True) -> dict[str, Any]:
        doc: dict[str, Any] = {"accessKey": self.access_key, "userType": self.user_type.value,
                               "policies": [p.to_json() for p in self.policies]}
        if with_secret:
            doc["secretKey"] = self.secret_key
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str) -> User:
        if not isinstance(doc, Mapping):
            raise AclFormatError(f"{where}: a user must be an object")
        access_key = str(doc.get("accessKey", "")).strip()
        secret_key = str(doc.get("secretKey", "")).strip()
        if not access_key or any(c in access_key for c in ", =\r\n\t"):
            raise AclFormatError(f"{where}: accessKey must be set, without spaces, commas or '='")
        if len(secret_key) < 8:
            raise AclFormatError(f"{where} ({access_key}): secretKey must have at least 8 characters")
        types = {t.value.lower(): t for t in UserType}
        raw_type = str(doc.get("userType", "Normal")).lower()
        if raw_type not in types:
            raise AclFormatError(f"{where} ({access_key}): userType must be Super, Broker or Normal")
        policies = tuple(Policy.from_json(p, f"{where} ({access_key}) policy {i}")
                         for i, p in enumerate(doc.get("policies", []) or []))
        return cls(access_key, secret_key, types[raw_type], policies)


@dataclasses.dataclass(frozen=True)
class AclDocument:
    users: Mapping[str, User] = dataclasses.field(default_factory=dict)
    default_policies: tuple[Policy, ...] = ()

    @classmethod
    def from_json(cls, doc: Any, source: str) -> AclDocument:
        if not isinstance(doc, Mapping):
            raise AclFormatError(f"{source}: the top level must be an object")
        users: dict[str, User] = {}
        for i, raw in enumerate(doc.get("users", []) or []):
            user = User.from_json(raw, f"{source}: user {i}")
            if user.access_key in users:
                raise AclFormatError(f"{source}: user {user.access_key!r} is defined twice")
            users[user.access_key] = user
        defaults = tuple(Policy.from_json(p, f"{source}: defaultPolicies {i}")
                         for i, p in enumerate(doc.get("defaultPolicies", []) or []))
        return cls(users, defaults)

    def to_json(self) -> dict[str, Any]:
        return {"users": [u.to_json() for u in self.users.values()],
                "defaultPolicies": [p.to_json() for p in self.default_policies]}

    def merged(self, other: AclDocument) -> AclDocument:
        """This document's users and defaults, with ``other``'s added where this has none."""
        users = dict(other.users)
        users.update(self.users)
        return AclDocument(users, self.default_policies + other.default_policies)


def decide(policies: Sequence[Policy], resource: Resource, actions: Iterable[Action],
           ip: IPAddress | None) -> bool:
    """Allowed when, for at least one of ``actions``, the most specific applying policy allows
    (a Deny wins over an Allow of the same specificity); nothing applies = denied."""
    for action in actions:
        best: tuple[int, int] | None = None
        allowed = False
        for policy in policies:
            if policy.applies(resource, action, ip):
                spec = policy.resource.specificity
                if best is None or spec > best:
                    best, allowed = spec, policy.allow
                elif spec == best and not policy.allow:
                    allowed = False
        if allowed:
            return True
    return False
