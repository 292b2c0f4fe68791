# ruff: noqa: N802  (method names are the RPC names)
"""The Broker service's ACL admin RPCs (``pocketmq acl user|policy``) and the slaves' ACL table
sync; the permission table lets only Super users (admin) and Broker users (sync) call them."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeAlias

import grpc

from pocketmq.broker.v1 import broker_pb2 as pb
from services.common.acl.protoconv import policy_from_proto, user_from_proto, user_to_proto
from services.common.errors import FailedPreconditionError, grpc_method

if TYPE_CHECKING:
    from services.broker.app import BrokerApp

log = logging.getLogger(__name__)
Ctx: TypeAlias = grpc.aio.ServicerContext


class AclAdminMixin:
    """Mixed into the Broker servicer (``self.app`` is the broker)."""

    app: BrokerApp

    def _acl_master(self) -> None:
        cfg = self.app.broker_config
        if not cfg.is_master:
            raise FailedPreconditionError(
                f"ACL users are managed on the master: broker {cfg.broker_name} (brokerId={cfg.broker_id}) "
                f"is a SLAVE; use the master at {self.app.master_addr or 'unknown yet'}")

    async def _acl_saved(self) -> None:
        await self.app.acl_table.persist_if_dirty()

    @grpc_method
    async def PutAclUser(self, request: pb.PutAclUserRequest, context: Ctx) -> pb.PutAclUserResponse:
        self._acl_master()
        user = self.app.acl_table.put(user_from_proto(request.user))
        await self._acl_saved()
        log.info("ACL user saved", extra={"user": user.access_key, "type": user.user_type.value,
                                          "policies": len(user.policies)})
        return pb.PutAclUserResponse(user=user_to_proto(user, with_secret=False))

    @grpc_method
    async def DeleteAclUser(self, request: pb.DeleteAclUserRequest, context: Ctx) -> pb.DeleteAclUserResponse:
        self._acl_master()
        self.app.acl_table.delete(request.access_key)
        await self._acl_saved()
        log.info("ACL user deleted", extra={"user": request.access_key})
        return pb.DeleteAclUserResponse()

    @grpc_method
    async def ListAclUsers(self, request: pb.ListAclUsersRequest, context: Ctx) -> pb.ListAclUsersResponse:
        return pb.ListAclUsersResponse(users=[user_to_proto(u, with_secret=False)
                                              for u in self.app.acl_table.all()])

    @grpc_method
    async def PutAclPolicy(self, request: pb.PutAclPolicyRequest, context: Ctx) -> pb.PutAclUserResponse:
        self._acl_master()
        policy = policy_from_proto(request.policy, f"policy of {request.access_key}")
        user = self.app.acl_table.put_policy(request.access_key, policy)
        await self._acl_saved()
        log.info("ACL policy saved", extra={"user": user.access_key, "resource": str(policy.resource)})
        return pb.PutAclUserResponse(user=user_to_proto(user, with_secret=False))

    @grpc_method
    async def DeleteAclPolicy(self, request: pb.DeleteAclPolicyRequest,
                              context: Ctx) -> pb.PutAclUserResponse:
        self._acl_master()
        user = self.app.acl_table.delete_policy(request.access_key, request.resource)
        await self._acl_saved()
        log.info("ACL policy deleted", extra={"user": user.access_key, "resource": request.resource})
        return pb.PutAclUserResponse(user=user_to_proto(user, with_secret=False))
