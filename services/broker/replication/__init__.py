"""Commit-log replication (HA) between a master and its slaves.

Sans-I/O protocol modules (h11's layout): :mod:`.events`, :mod:`.errors`, :mod:`.framing` (byte
layout and encoders), :mod:`.auth` (the optional ``haAuthSecret`` handshake) and :mod:`.protocol`
(the per-connection state machines); :mod:`.waiter` holds SYNC_MASTER waits; :mod:`.master` (the
HA port and slave table, with :mod:`.master_conn` per connection and :mod:`.master_settings`,
:mod:`.progress`) and :mod:`.slave` own the sockets; :mod:`.service` wires them into the broker.  See
``docs/replication.md``.
"""

from services.broker.replication.auth import (
    AUTH_TIMEOUT_S,
    MasterAuthenticator,
    SlaveAuthenticator,
    auth_mac,
    encode_challenge,
)
from services.broker.replication.errors import (
    AckBeyondMaxOffsetError,
    AckBeyondSentOffsetError,
    AckRegressionError,
    AuthenticationError,
    AuthenticationFailedError,
    AuthRequiredError,
    AuthVersionError,
    ContinuityError,
    FrameTooLargeError,
    MalformedFrameError,
    MasterNotAuthenticatingError,
    ProtocolError,
    RequestBeyondMaxOffsetError,
    RequestOffsetUnavailableError,
)
from services.broker.replication.events import (
    AckReceived,
    DataReceived,
    Event,
    HeartbeatReceived,
    SlaveEvent,
    TransferPlan,
)
from services.broker.replication.framing import (
    ACK_SIZE,
    AUTH_CHALLENGE_SIZE,
    AUTH_CONTEXT,
    AUTH_MAC_SIZE,
    AUTH_MAGIC,
    AUTH_NONCE_SIZE,
    AUTH_VERSION,
    DEFAULT_MAX_BODY_SIZE,
    HARD_MAX_BODY_SIZE,
    MAX_OFFSET,
    TRANSFER_HEADER_SIZE,
    encode_ack,
    encode_heartbeat,
    encode_transfer_header,
)
from services.broker.replication.protocol import (
    MasterConnectionProtocol,
    SlaveConnectionProtocol,
    first_transfer_offset,
)
from services.broker.replication.waiter import ReplicationWaiter, SlaveAckTracker, WaiterClosedError

__all__ = [
    "ACK_SIZE",
    "AUTH_CHALLENGE_SIZE",
    "AUTH_CONTEXT",
    "AUTH_MAC_SIZE",
    "AUTH_MAGIC",
    "AUTH_NONCE_SIZE",
    "AUTH_TIMEOUT_S",
    "AUTH_VERSION",
    "DEFAULT_MAX_BODY_SIZE",
    "HARD_MAX_BODY_SIZE",
    "MAX_OFFSET",
    "TRANSFER_HEADER_SIZE",
    "AckBeyondMaxOffsetError",
    "AckBeyondSentOffsetError",
    "AckReceived",
    "AckRegressionError",
    "AuthRequiredError",
    "AuthVersionError",
    "AuthenticationError",
    "AuthenticationFailedError",
    "ContinuityError",
    "DataReceived",
    "Event",
    "FrameTooLargeError",
    "HeartbeatReceived",
    "MalformedFrameError",
    "MasterAuthenticator",
    "MasterConnectionProtocol",
    "MasterNotAuthenticatingError",
    "ProtocolError",
    "ReplicationWaiter",
    "RequestBeyondMaxOffsetError",
    "RequestOffsetUnavailableError",
    "SlaveAckTracker",
    "SlaveAuthenticator",
    "SlaveConnectionProtocol",
    "SlaveEvent",
    "TransferPlan",
    "WaiterClosedError",
    "auth_mac",
    "encode_ack",
    "encode_challenge",
    "encode_heartbeat",
    "encode_transfer_header",
    "first_transfer_offset",
]
