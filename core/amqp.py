"""Blocking AMQP links (python-qpid-proton's utils) that accept a router's vhost-qualified
echo: qdrouterd 1.19 answers a link-routed attach (a topic) under `multiTenant` with the
address qualified by the vhost (`<vhost>/news/a.b` for `news/a.b`), which proton's blocking API
takes for a refusal. A real refusal (no terminus address at all) still raises LinkException.
"""
from proton import LinkException
from proton._utils import (  # Fetcher and BlockingLink are not re-exported by proton.utils
    BlockingConnection,
    BlockingLink,
    BlockingReceiver,
    BlockingSender,
    Fetcher,
)


def _same_node(asked: str | None, answered: str | None) -> bool:
    if not asked:
        return True
    return answered is not None and (answered == asked or answered.endswith("/" + asked))


def _refuse(link: BlockingLink, kind: str) -> None:
    # As proton's own check: the peer may follow with a detach that carries the condition.
    link._waitForClose()
    link.link.close()
    raise LinkException(f"Failed to open {kind} {link.link.name}, the peer refused its address")


class _Sender(BlockingSender):
    def __init__(self, connection: BlockingConnection, sender) -> None:
        BlockingLink.__init__(self, connection, sender)
        if not _same_node(self.link.target.address, self.link.remote_target.address):
            _refuse(self, "sender")


class _Receiver(BlockingReceiver):
    def __init__(self, connection: BlockingConnection, receiver, fetcher: Fetcher,
                 credit: int = 1) -> None:
        BlockingLink.__init__(self, connection, receiver)
        if not _same_node(self.link.source.address, self.link.remote_source.address):
            _refuse(self, "receiver")
        if credit:
            receiver.flow(credit)
        self.fetcher = fetcher
        self.container = connection.container


def open_sender(conn: BlockingConnection, address: str) -> BlockingSender:
    """`conn.create_sender(address)`, tolerant of the vhost-qualified echo."""
    return _Sender(conn, conn.container.create_sender(conn.conn, address))


def open_receiver(conn: BlockingConnection, address: str, credit: int = 1) -> BlockingReceiver:
    """`conn.create_receiver(address, credit=credit)`, tolerant of the vhost-qualified echo."""
    fetcher = Fetcher(conn, credit)
    return _Receiver(conn, conn.container.create_receiver(conn.conn, address, handler=fetcher),
                     fetcher, credit=credit)
