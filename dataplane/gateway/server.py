"""The gateway: its listeners, the MQTT clients connected to it, and the retained-message
writes, which go out one at a time so that the last retained message of a topic wins."""

import asyncio
import logging
import ssl

from .. import tls_files
from ..admission import Admission, Limits
from ..control import GatewayStore
from . import store
from .session import MqttSession

logger = logging.getLogger("dataplane.gateway")

HANDSHAKE_TIMEOUT = 5.0  # seconds from accept to CONNECT answered, by default


class Gateway:
    def __init__(self, router_host: str, router_port: int, control: GatewayStore,
                 book: store.AddressBook | None = None, limits: Limits | None = None,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT, more_routers: tuple = (),
                 router_tls: "tls_files.ClientContext | None" = None,
                 space_router_tls: "tls_files.ClientContext | None" = None):
        self.router_host, self.router_port = router_host, router_port
        # TLS to the router above and the mesh's others, and to a space's own router
        # (Kubernetes: its internal listener, the name checked); each context made again when
        # its CA file changes (a rotated bundle)
        self.router_tls, self.space_router_tls = router_tls, space_router_tls
        # The other routers of a mesh that serves every space (one machine): where a client
        # goes, in order, when the first does not answer.
        self.more_routers = tuple(more_routers)
        self.control = control  # the control plane: retained messages, sessions, addresses
        self.book = book or store.AddressBook(control)
        # per source: connections still logging in, their rate, delays after failed logins
        self.admission = Admission(limits)
        self.handshake_timeout = handshake_timeout  # from accept to CONNACK
        self.loop = asyncio.get_running_loop()
        self.sessions: set = set()
        self.clients: dict = {}  # (vhost, client id) -> MqttSession
        self.servers: list = []
        self._tasks: set = set()
        self._retain_queue: asyncio.Queue = asyncio.Queue()
        self._routers: dict = {}  # vhost -> (host, port) of its router
        self.spawn(self._retain_writer())

    def spawn(self, coro) -> asyncio.Task:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def listen(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None):
        tls = ssl_context is not None
        server = await self.loop.create_server(lambda: MqttSession(self, tls), host, port,
                                               ssl=ssl_context, reuse_address=True)
        self.servers.append(server)
        return server

    async def router_for(self, vhost: str) -> tuple[str, int]:
        where = self._routers.get(vhost)
        if where is None:
            where = await asyncio.to_thread(self.control.router_of, vhost,
                                            (self.router_host, self.router_port))
            self._routers[vhost] = where
        return where

    async def routers_for(self, vhost: str) -> tuple[list[tuple[str, int]], ssl.SSLContext | None]:
        """The space's router, then, where that is the mesh every space shares, its other
        routers: a client's AMQP connection is opened to the first that answers; and the TLS
        to them, if any."""
        first = await self.router_for(vhost)
        if first != (self.router_host, self.router_port):
            # the space's own router (Kubernetes): its Service's pods are the failover
            return [first], self.space_router_tls.get() if self.space_router_tls else None
        return [first, *(r for r in self.more_routers if r != first)], \
            self.router_tls.get() if self.router_tls else None

    # -- retained messages -----------------------------------------------------------------------
    def retain(self, vhost: str, publish, link, amqp) -> None:
        """Store a retained PUBLISH once the router took the sender (so a user who may not send
        to the topic cannot leave a message for its subscribers)."""
        self._retain_queue.put_nowait((vhost, publish, amqp.link_open(link)))

    async def _retain_writer(self) -> None:
        while True:
            vhost, publish, opened = await self._retain_queue.get()
            try:
                await opened
                await asyncio.to_thread(self.control.save_retained, vhost, publish.topic,
                                        publish.payload, publish.qos)
            except Exception as exc:  # refused sender, or the database: the message is not kept
                logger.warning("mqtt.retain_failed", extra={"vhost": vhost,
                                                            "topic": publish.topic,
                                                            "reason": str(exc)})

    async def retained(self, vhost: str, topic_filter: str) -> list:
        try:
            return await asyncio.to_thread(self.control.load_retained, vhost, topic_filter)
        except Exception:
            logger.exception("mqtt.retained_read_failed", extra={"vhost": vhost})
            return []

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for session in list(self.sessions):
            session._close("gateway_stopping")
        await asyncio.sleep(0.2)
