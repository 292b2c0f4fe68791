"""``pocketmq acl user|policy``: access control users and their policies in the ACL table of
every master broker (synced to the slaves). Needs a Super user's credentials (--access-key or
POCKETMQ_ACCESS_KEY / POCKETMQ_SECRET_KEY). Users of the brokers' aclConfigFile are managed in
that file instead."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pocketmq.broker.v1 import broker_pb2
from pocketmq.cli.common import ACCESS, BROKER, CLUSTER, Conn, FailedError, connected, results_rows
from pocketmq.cli.output import print_json, proto_dict, stdout_console, table
from pocketmq.common.v1 import common_pb2

app = typer.Typer(help="Access control: users (AccessKey/SecretKey) and their policies.",
                  no_args_is_help=True)
user_app = typer.Typer(help="ACL users.", no_args_is_help=True)
policy_app = typer.Typer(help="Policies of an ACL user.", no_args_is_help=True)
app.add_typer(user_app, name="user")
app.add_typer(policy_app, name="policy")

AccessKeyArg = Annotated[str, typer.Argument(metavar="ACCESS_KEY", help="The user's AccessKey.")]
ResourceOpt = Annotated[str, typer.Option(
    "--resource", "-r", help="Topic:<name>, Topic:<prefix>*, Group:..., Cluster:... or *.")]


def _report(what: str, results: list[Any], conn: Conn) -> None:
    rows, ok = results_rows(results, "reply")
    if conn.json:
        print_json({"action": what, "results": rows})
    else:
        stdout_console().print(table(what, ["broker", "address", "result", "error"], (
            [r.target.broker_name, r.target.addr, "ok" if r.ok else "failed", str(r.error or "")]
            for r in results)))
    if not ok:
        raise FailedError


@user_app.command("create")
@connected(CLUSTER, BROKER, ACCESS)
def user_create(
    user_key: AccessKeyArg,
    user_secret: Annotated[str, typer.Option(
        "--user-secret", envvar="POCKETMQ_ACL_USER_SECRET", prompt="Secret key of the new user",
        hide_input=True, confirmation_prompt=True, show_default=False,
        help="The user's SecretKey (asked for when not given; at least 8 characters).")],
    user_type: Annotated[str, typer.Option("--type", help="Normal, Broker or Super.")] = "Normal",
    *,
    conn: Conn,
) -> None:
    """Create a user (or replace its secret and type, dropping its policies) on every master."""
    request = broker_pb2.PutAclUserRequest(user=common_pb2.AclUser(
        access_key=user_key, secret_key=user_secret, user_type=user_type))
    _report(f"create user {user_key}",
            conn.call(lambda admin: admin.acl("PutAclUser", request, conn.cluster)), conn)


@user_app.command("delete")
@connected(CLUSTER, BROKER, ACCESS)
def user_delete(user_key: AccessKeyArg, *, conn: Conn) -> None:
    """Delete a user on every master."""
    request = broker_pb2.DeleteAclUserRequest(access_key=user_key)
    _report(f"delete user {user_key}",
            conn.call(lambda admin: admin.acl("DeleteAclUser", request, conn.cluster)), conn)


@user_app.command("list")
@connected(CLUSTER, BROKER, ACCESS)
def user_list(*, conn: Conn) -> None:
    """Users and their policies (never their secrets), per master."""
    request = broker_pb2.ListAclUsersRequest()
    results = conn.call(lambda admin: admin.acl("ListAclUsers", request, conn.cluster))
    if conn.json:
        rows, ok = results_rows(results)
        for row, r in zip(rows, results, strict=True):
            if r.value is not None:
                row["users"] = [proto_dict(u) for u in r.value.users]
        print_json({"results": rows})
    else:
        ok = all(r.ok for r in results)
        stdout_console().print(table("ACL users", ["broker", "user", "type", "policies"], (
            [r.target.broker_name, u.access_key, u.user_type,
             "; ".join(f"{'Deny' if p.deny else 'Allow'} {','.join(p.actions)} {p.resource}"
                       + (f" from {','.join(p.source_ips)}" if p.source_ips else "") for p in u.policies)]
            for r in results if r.value is not None for u in r.value.users)))
    if not ok:
        raise FailedError


@policy_app.command("set")
@connected(CLUSTER, BROKER, ACCESS)
def policy_set(
    user_key: AccessKeyArg,
    resource: ResourceOpt,
    actions: Annotated[str, typer.Option(
        "--actions", "-a", help="Comma-separated: Pub, Sub, Create, Update, Delete, Get, List or All.")],
    deny: Annotated[bool, typer.Option("--deny/--allow", help="Deny instead of allow.")] = False,
    source_ip: Annotated[list[str] | None, typer.Option(
        "--source-ip", help="Only from this address range (CIDR); repeatable.")] = None,
    *,
    conn: Conn,
) -> None:
    """Give a user a policy for a resource (replacing its policy for the same resource)."""
    names = [a.strip() for a in actions.split(",") if a.strip()]
    policy = common_pb2.AclPolicy(resource=resource, actions=names, deny=deny, source_ips=source_ip or [])
    request = broker_pb2.PutAclPolicyRequest(access_key=user_key, policy=policy)
    _report(f"set policy {resource} of {user_key}",
            conn.call(lambda admin: admin.acl("PutAclPolicy", request, conn.cluster)), conn)


@policy_app.command("delete")
@connected(CLUSTER, BROKER, ACCESS)
def policy_delete(user_key: AccessKeyArg, resource: ResourceOpt, *, conn: Conn) -> None:
    """Remove a user's policy for a resource."""
    request = broker_pb2.DeleteAclPolicyRequest(access_key=user_key, resource=resource)
    _report(f"delete policy {resource} of {user_key}",
            conn.call(lambda admin: admin.acl("DeleteAclPolicy", request, conn.cluster)), conn)
