"""A client whose AMQP open hostname is its space's endpoint host (what a TLS client sends,
the name it checks the certificate against) lands in that space on both routers: the host is
an alias of the space's vhost (qdrouterd's `aliases`). Real routers, real proton clients."""
import uuid

from proton.utils import BlockingConnection

from config_service import services
from tests.conftest import CTX
from tests.workers.conftest import sync
from tests.workers.connected import PASSWORD, round_trip, standard_space

BOTH_ROUTERS = True


def test_the_endpoint_host_as_open_hostname_reaches_the_space(router, tenant):
    host = f"mq-{uuid.uuid4().hex[:6]}.spaces.test"
    space = standard_space(tenant, plan="standard-small", spec={
        "endpoints": [{"name": "messaging", "expose": {"routeHost": host}}]})
    try:
        conn = BlockingConnection(f"amqp://127.0.0.1:{router.amqp_port}",
                                  user=f"app@{space.vhost}", password=PASSWORD,
                                  virtual_host=host, allowed_mechs="PLAIN",
                                  allow_insecure_mechs=True, timeout=10)
        try:
            round_trip(conn, "by host")
        finally:
            conn.close()
    finally:
        services.delete_address_space(ctx=CTX, space=space)
        sync(space)
