"""Fixtures for the auth service: the real server on a free port in a thread, reading the test
database (committed rows: transactional_db), and spaces and messaging users made through the
service functions."""
import threading
import uuid

import pytest
from proton.utils import BlockingConnection

from config_service import services
from dataplane.authservice.server import AuthServer
from maas import bindings
from tests.conftest import CTX, b64

HANDSHAKE_TIMEOUT = 3.0


@pytest.fixture
def auth_port(transactional_db):
    server = AuthServer(("127.0.0.1", 0), bindings.verify, handshake_timeout=HANDSHAKE_TIMEOUT)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join(5)


def login(port: int, user: str, password: str) -> BlockingConnection:
    return BlockingConnection(f"amqp://127.0.0.1:{port}", user=user, password=password,
                              allowed_mechs="PLAIN", allow_insecure_mechs=True, timeout=5)


def identity_of(conn: BlockingConnection) -> tuple[dict, object]:
    """authenticated-identity of the auth service's open, as a plain dict, and its
    address-authz (None: it sends none)."""
    props = conn.conn.remote_properties
    return dict(props["authenticated-identity"]), props.get("address-authz")


def new_space(tenant):
    return services.create_address_space(ctx=CTX, tenant=tenant, name=f"s{uuid.uuid4().hex[:6]}",
                                         type="brokered", plan="brokered-single-broker")


def new_user(space, username: str, password: str, rules=None):
    rules = rules if rules is not None else [{"addresses": ["orders"], "operations": ["send"]}]
    return services.create_messaging_user(
        ctx=CTX, space=space, username=username,
        authentication={"type": "password", "password": b64(password)}, authorization=rules)
