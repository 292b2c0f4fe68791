"""Access control for the gRPC services: users with AccessKey/SecretKey, signed requests
(:mod:`pocketmq.wire.auth`), ACL 2.0-style policies, and one server interceptor that checks
every RPC against a per-method permission table. See docs/acl.md."""
