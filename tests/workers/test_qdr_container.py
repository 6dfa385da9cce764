"""Management connections share one SSL configuration per process (proton made two OpenSSL
contexts for each connection, about 50 ms of CPU, once a second for the router watch); the
rest of the container is what proton's own Container sets up."""
import os

from proton.reactor import Container

from tests.router.conftest import ADMIN_PASSWORD
from workers.clients.qdr import Management, SharedSslContainer

# Reactor state that differs between any two containers (queues, handlers, clocks)
PER_CONTAINER = {"container_id", "ssl", "_collector", "_global_handler", "_handler", "_now",
                 "_timerheap"}


def test_the_container_is_set_up_as_protons_own():
    theirs, ours = Container(), SharedSslContainer()
    assert vars(ours).keys() == vars(theirs).keys()  # a proton that adds state shows here
    assert {k: repr(v) for k, v in vars(ours).items() if k not in PER_CONTAINER} == \
        {k: repr(v) for k, v in vars(theirs).items() if k not in PER_CONTAINER}
    assert type(ours.global_handler) is type(theirs.global_handler)
    assert type(ours.ssl) is type(theirs.ssl) and ours.ssl.client is not None
    assert ours.container_id != SharedSslContainer().container_id


def test_one_ssl_configuration_per_process_never_a_parents():
    first, second = SharedSslContainer(), SharedSslContainer()
    assert first.ssl is second.ssl
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a fresh configuration of its own
        os.write(write, b"1" if SharedSslContainer().ssl is not first.ssl else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"


def test_a_management_connection_over_it_reads_the_router(router):
    mgmt = Management(f"amqp://127.0.0.1:{router.mgmt_port}", "admin", ADMIN_PASSWORD,
                      timeout=5)
    try:
        assert isinstance(mgmt.conn.container, SharedSslContainer)
        assert mgmt.uptime_seconds() >= 0
    finally:
        mgmt.close()

