"""ACL model, signatures and the authenticator (pure parts; the servers are tested with real
processes in tests/integration/acl)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
from pathlib import Path

import pytest

from pocketmq.wire.auth import (
    Credentials,
    Signer,
    auth_metadata,
    format_date_time,
    parse_authorization,
    parse_date_time,
)
from services.common.acl.authn import AclStore, AuthenticationError, Authenticator
from services.common.acl.model import (
    AclDocument,
    AclFormatError,
    Action,
    Policy,
    Resource,
    ResourceType,
    User,
    decide,
)

T0 = 1_795_000_000.0


def test_signature_is_the_sdks_hex_hmac_sha1_of_the_date_time() -> None:
    stamp, auth = auth_metadata(Credentials("ak1", "secret-1"), T0)
    assert stamp == ("x-mq-date-time", format_date_time(T0))
    expected = hmac.new(b"secret-1", stamp[1].encode(), hashlib.sha1).hexdigest()
    assert auth == ("authorization",
                    f"MQv2-HMAC-SHA1 Credential=ak1, SignedHeaders=x-mq-date-time, Signature={expected}")
    assert parse_authorization(auth[1]) == ("ak1", expected)
    assert parse_date_time(stamp[1]) == T0
    assert "secret-1" not in repr(Credentials("ak1", "secret-1"))
    # The Python SDK without credentials: an empty Credential is an unsigned request.
    empty = "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=ab"
    assert parse_authorization(empty) == ("", "")


def test_signer_reuses_the_header_within_a_second() -> None:
    now = [T0]
    signer = Signer(Credentials("ak", "sk-123456"), clock=lambda: now[0])
    first = signer.metadata()
    now[0] += 0.5
    assert signer.metadata() is first
    now[0] += 1
    assert signer.metadata() != first


def _policies(*docs: dict[str, object]) -> list[Policy]:
    return [Policy.from_json(d, "test") for d in docs]


def test_decide_most_specific_wins_and_deny_beats_allow() -> None:
    t = Resource(ResourceType.TOPIC, "orders-eu")
    p = _policies({"resource": "Topic:orders*", "actions": ["Pub", "Sub"]},
                  {"resource": "Topic:orders-eu", "actions": "Pub", "decision": "Deny"})
    assert not decide(p, t, [Action.PUB], None)
    assert decide(p, t, [Action.SUB], None)
    assert decide(p, Resource(ResourceType.TOPIC, "orders-us"), [Action.PUB], None)
    assert not decide(p, Resource(ResourceType.GROUP, "orders-eu"), [Action.SUB], None)
    same = _policies({"resource": "Topic:x", "actions": ["Pub"]},
                     {"resource": "Topic:x", "actions": ["Pub"], "decision": "Deny"})
    assert not decide(same, Resource(ResourceType.TOPIC, "x"), [Action.PUB], None)
    ip = _policies({"resource": "*", "actions": ["All"], "sourceIps": ["10.0.0.0/8"]})
    assert decide(ip, t, [Action.DELETE], ipaddress.ip_address("10.1.2.3"))
    assert not decide(ip, t, [Action.DELETE], ipaddress.ip_address("192.168.1.1"))
    assert not decide(ip, t, [Action.DELETE], None)


@pytest.mark.parametrize("doc", [
    {"users": [{"accessKey": "a", "secretKey": "short"}]},
    {"users": [{"accessKey": "a b", "secretKey": "long-enough"}]},
    {"users": [{"accessKey": "a", "secretKey": "long-enough", "userType": "Root"}]},
    {"users": [{"accessKey": "a", "secretKey": "long-enough", "policies": [{"resource": "Queue:x",
                                                                           "actions": ["Pub"]}]}]},
    {"defaultPolicies": [{"resource": "Topic:x", "actions": ["Publish"]}]},
    {"defaultPolicies": [{"resource": "Topic:x", "actions": ["Pub"], "sourceIps": ["nope"]}]},
])
def test_bad_documents_are_refused_naming_the_entry(doc: dict[str, object]) -> None:
    with pytest.raises(AclFormatError):
        AclDocument.from_json(doc, "acl.json")


def _write(path: Path, users: list[dict[str, object]]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"users": users}))
    os.replace(tmp, path)


def test_authenticator_window_replay_wrong_secret_and_hot_reload(tmp_path: Path) -> None:
    path = tmp_path / "acl.json"
    _write(path, [{"accessKey": "app", "secretKey": "app-secret-1"}])
    mono = [0.0]
    store = AclStore(str(path), clock=lambda: mono[0])
    now = [T0]
    auth = Authenticator(store, window_s=60, clock=lambda: now[0])

    def call(ak: str, sk: str, at: float) -> User | None:
        (_, stamp), (_, header) = auth_metadata(Credentials(ak, sk), at)
        return auth.authenticate(header, stamp)

    user = call("app", "app-secret-1", T0 - 30)  # skewed clock, inside the window
    assert user is not None and user.access_key == "app"
    assert auth.authenticate(None, None) is None
    refused = (("app", "wrong-secret", T0), ("ghost", "app-secret-1", T0), ("app", "app-secret-1", T0 - 61))
    for ak, sk, at in refused:
        with pytest.raises(AuthenticationError) as info:
            call(ak, sk, at)
        assert "secret" not in str(info.value).replace("secret key", "")
    # A verified header stops working once the window has passed (replay).
    (_, stamp), (_, header) = auth_metadata(Credentials("app", "app-secret-1"), T0)
    assert auth.authenticate(header, stamp) is not None
    now[0] = T0 + 61
    with pytest.raises(AuthenticationError, match="time window"):
        auth.authenticate(header, stamp)
    # Rotated secret: the file is re-read, the old secret stops working.
    _write(path, [{"accessKey": "app", "secretKey": "app-secret-2"}])
    mono[0] += 2
    with pytest.raises(AuthenticationError):
        call("app", "app-secret-1", now[0])
    assert call("app", "app-secret-2", now[0]) is not None
    # A broken file keeps the previous ACL.
    path.write_text("{not json")
    mono[0] += 2
    assert call("app", "app-secret-2", now[0] + 1) is not None


def test_broker_credential_is_parsed_checked_and_never_printed() -> None:
    from services.broker.config import BrokerConfig, mask_secrets
    from services.broker.storage.config import StoreConfig
    from services.common.config import ConfigError, to_properties

    inner = json.dumps({"accessKey": "broker", "secretKey": "broker-secret-0123"})
    cfg = BrokerConfig(inner_client_authentication_credentials=inner, acl_enable=True,
                       acl_config_file="/etc/pocketmq/acl.json")
    assert cfg.inner_credentials == Credentials("broker", "broker-secret-0123")
    text = mask_secrets(to_properties([cfg, StoreConfig()]))
    assert "broker-secret-0123" not in text and "broker-secret-0123" not in repr(cfg)
    assert "# innerClientAuthenticationCredentials=<hidden: set, not shown>" in text.splitlines()
    with pytest.raises(ConfigError) as bad:
        BrokerConfig(inner_client_authentication_credentials='{"accessKey": "broker", "secret": "x-secret"}')
    assert bad.value.key == "innerClientAuthenticationCredentials" and "x-secret" not in str(bad.value)
    with pytest.raises(ConfigError) as missing:
        BrokerConfig(acl_enable=True)
    assert missing.value.key == "aclConfigFile"


def test_spark_source_options_carry_credentials_without_showing_them() -> None:
    from pocketmq.errors import InvalidArgumentError
    from pocketmq.spark.options import ReadOptions, WriteOptions

    options = {"topic": "t", "accessKey": "app", "secretKey": "app-secret-123"}
    read = ReadOptions.parse(options, streaming=False)
    assert read.credentials == Credentials("app", "app-secret-123")
    assert "app-secret-123" not in repr(read)
    write = WriteOptions.parse({"topic": "t", "accesskey": "app", "secretkey": "app-secret-123"})
    assert write.credentials == Credentials("app", "app-secret-123")
    with pytest.raises(InvalidArgumentError, match="accessKey/secretKey"):
        ReadOptions.parse({"topic": "t", "accessKey": "app"}, streaming=False)
