"""One MQTT client of the gateway: its socket, and its own AMQP connection to the space's router,
opened with the client's login, so the router authenticates it and enforces its rules.

Packets are handled in order. CONNECT and SUBSCRIBE wait for the router's answer: meanwhile
the socket is paused and later packets wait in `backlog`. A PUBLISH goes out at once on a
sender per address (QoS 0 pre-settled, QoS 1 unsettled and PUBACKed when the router accepted
it); a sender the router refuses closes the MQTT connection, the only refusal MQTT 3.1.1 has
for a PUBLISH.

One module of 600 lines: the MQTT side and the AMQP side of a client are one state machine
(a SUBSCRIBE waits for a receiver link, a link's refusal closes the MQTT connection, a QoS 1
ack waits for the router's settlement); the codec, the topic mapping and the AMQP transport
are modules of their own.
"""

import asyncio
import json
import logging
import time
import uuid
from collections import deque

from proton import Delivery

from . import codec, mapping, metrics, store
from .amqp import AmqpConnection, LinkRefused, encode

logger = logging.getLogger("dataplane.gateway")

INFLIGHT = 100  # QoS 1 messages a receiver may have unacknowledged by the MQTT client
QOS0_CREDIT = 200  # credit of a QoS 0 receiver, topped up as its messages are written
MAX_QUEUED = 1000  # messages waiting for the router's credit before the client is paused
OPEN_TIMEOUT = 10.0
SESSION_READY_TIMEOUT = 30.0  # seconds a new durable subscription may take to be configured
DRAIN_TIMEOUT = 5.0  # seconds a leaving client's messages may wait for the router's credit


class Subscription:
    def __init__(self, topic_filter: str, qos: int):
        self.filter = topic_filter
        self.qos = qos
        self.links: list = []


class MqttSession(asyncio.Protocol):
    def __init__(self, gateway, tls: bool = False):
        self.gw = gateway
        self.tls = tls
        self.decoder = codec.Decoder()
        self.sock: asyncio.Transport | None = None
        self.peer = None
        self.amqp: AmqpConnection | None = None
        self.vhost = ""
        self.login = ""
        self.client_id = ""
        self.connected = False
        self.closing = False
        self.busy = False
        self.backlog: deque = deque()
        self.senders: dict = {}  # AMQP address -> sender link
        self.unacked: dict = {}  # delivery -> (ack packet type, packet id) of a QoS 1/2 PUBLISH
        self.subs: dict = {}  # topic filter -> Subscription
        self.receivers: dict = {}  # receiver link -> (Subscription, mapping.Source)
        self.inflight: dict = {}  # our packet id -> (link, delivery)
        self.starved: set = set()  # QoS 0 receivers whose credit waits for the socket to drain
        self.write_paused = False
        self.flow_paused = False  # reading stopped until the router takes queued messages
        self.next_id = 0
        self.will: codec.Publish | None = None
        self.clean = True  # clean session; 0 keeps subscriptions and QoS 1 messages
        self.keep_alive = 0
        self.last_seen = time.monotonic()
        self._timer = None
        self.source = ""  # the client's address
        self.pending = False  # counted by the gateway's admission until CONNACK 0

    # -- socket ----------------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.sock = transport
        self.peer = transport.get_extra_info("peername")
        self.source = self.peer[0] if self.peer else ""
        if not self.gw.admission.accept(self.source):  # over its source's limits: closed now
            self.closing = True
            transport.abort()
            return
        self.pending = True
        self.gw.sessions.add(self)
        # A client that never sends CONNECT is dropped (3.1.1 section 3.1: "reasonable time").
        self._timer = self.gw.loop.call_later(self.gw.handshake_timeout, self._check_alive)

    def _settle(self) -> None:
        """No longer one of its source's connections still authenticating (dataplane/admission.py)."""
        if self.pending:
            self.pending = False
            self.gw.admission.settled(self.source)

    def data_received(self, data: bytes) -> None:
        self.last_seen = time.monotonic()
        try:
            self.backlog.extend(self.decoder.feed(data))
        except codec.ProtocolError as exc:
            self._close("protocol_error", error=str(exc))
            return
        self._drain()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        starved, self.starved = self.starved, set()
        for link in starved:
            if link in self.receivers:
                link.flow(QOS0_CREDIT - link.credit)
        if self.amqp is not None:
            self.amqp.flush()

    def connection_lost(self, exc) -> None:
        self._settle()
        self.gw.sessions.discard(self)
        if self.connected:
            metrics.CONNECTIONS.dec()
        if self._timer is not None:
            self._timer.cancel()
        if self.gw.clients.get((self.vhost, self.client_id)) is self:
            del self.gw.clients[(self.vhost, self.client_id)]
        self.closing = True
        if self.will is not None and self.amqp is not None and not self.amqp.closed:
            will, self.will = self.will, None
            self.gw.spawn(self._publish_will(will))
        elif self.amqp is not None:
            self.gw.spawn(self._close_amqp())
        logger.info("mqtt.disconnected", extra={"vhost": self.vhost, "client_id": self.client_id})

    def _refuse(self, code: int) -> None:
        metrics.connack(code)
        self._write(codec.connack(code))

    def _write(self, data: bytes) -> None:
        if not self.sock.is_closing():
            self.sock.write(data)

    def _close(self, event: str, **extra) -> None:
        """Close the MQTT connection; the will (if any) goes out from connection_lost."""
        if not self.closing:
            logger.info(f"mqtt.{event}", extra={"vhost": self.vhost, "client_id": self.client_id,
                                                **extra})
        self.closing = True
        self.backlog.clear()
        if self.sock is not None:
            self.sock.close()

    def _check_alive(self) -> None:
        if self.closing:
            return
        if not self.connected:
            self._close("connect_timeout")
            return
        # 3.1.1 section 3.1.2.10: nothing for one and a half keep-alive periods ends the client.
        idle = time.monotonic() - self.last_seen
        limit = self.keep_alive * 1.5
        if idle >= limit:
            self._close("keep_alive_expired", keep_alive=self.keep_alive)
            return
        self._timer = self.gw.loop.call_later(limit - idle + 0.05, self._check_alive)

    # -- packets ---------------------------------------------------------------------------------
    def _drain(self) -> None:
        while self.backlog and not self.busy and not self.closing:
            kind, packet = self.backlog.popleft()
            try:
                self._handle(kind, packet)
            except Exception:
                logger.exception("mqtt.packet_failed", extra={"vhost": self.vhost})
                self._close("internal_error")
        if self.amqp is not None:
            self.amqp.flush()

    def _run(self, coro) -> None:
        """Run an asynchronous step; later packets wait until it is done."""
        self.busy = True
        self.sock.pause_reading()

        async def step():
            try:
                await coro
            except Exception:
                logger.exception("mqtt.step_failed", extra={"vhost": self.vhost})
                self._close("internal_error")
            finally:
                self.busy = False
                if not self.closing and not self.flow_paused:
                    self.sock.resume_reading()
                    self._drain()

        self.gw.spawn(step())

    def _handle(self, kind: int, packet) -> None:
        if kind == codec.PUBLISH and self.connected:
            self._on_publish(packet)
        elif kind == codec.PUBACK and self.connected:
            self._on_puback(packet)
        elif kind == codec.CONNECT and not self.connected and self.amqp is None:
            self._run(self._on_connect(packet))
        elif not self.connected:
            self._close("protocol_error", error="first packet is not CONNECT")
        elif kind == codec.SUBSCRIBE:
            self._run(self._on_subscribe(packet))
        elif kind == codec.UNSUBSCRIBE:
            for topic_filter in packet.filters:
                self._unsubscribe(topic_filter)
            if self.clean:
                self._write(codec.ack(codec.UNSUBACK, packet.packet_id))
            else:
                self._run(self._forget(packet))
        elif kind == codec.PINGREQ:
            self._write(codec.PINGRESP_PACKET)
        elif kind == codec.PUBREL:
            self._write(codec.ack(codec.PUBCOMP, packet))
        elif kind in (codec.PUBREC, codec.PUBCOMP):
            pass  # the gateway sends QoS 0 and 1 only
        elif kind == codec.DISCONNECT:
            self.will = None  # a clean DISCONNECT discards the will (3.1.2.5)
            self._close("disconnect")
        else:
            self._close("protocol_error", error=f"unexpected packet type {kind}")

    async def _on_connect(self, c: codec.Connect) -> None:
        if (c.protocol, c.level) not in (("MQTT", 4), ("MQIsdp", 3)):
            self._refuse(codec.BAD_PROTOCOL)
            self._close("refused", reason="protocol level", level=c.level)
            return
        if not c.client_id and not c.clean_session:
            self._refuse(codec.ID_REJECTED)
            self._close("refused", reason="empty client id with clean session 0")
            return
        user, at, vhost = (c.username or "").rpartition("@")
        if not at or not user or "." not in vhost or c.password is None:
            # The login names the space (`user@<tenant>.<space>`), as on the router.
            self._refuse(codec.BAD_LOGIN)
            self._close("refused", reason="login is not user@tenant.space")
            return
        self.vhost, self.login = vhost, c.username
        self.client_id = c.client_id or f"auto-{uuid.uuid4().hex}"
        try:
            password = c.password.decode("utf-8")
        except UnicodeDecodeError:
            password = ""
        delay = self.gw.admission.delay(self.source)
        if delay:  # its source's logins failed lately: this one waits before it is checked
            await asyncio.sleep(delay)
        code = await self._open_amqp(password)
        if code != codec.ACCEPTED:
            if code in (codec.BAD_LOGIN, codec.NOT_AUTHORIZED):
                self.gw.admission.failed(self.source)
            self._refuse(code)
            self._close("refused", reason="router", code=code)
            return
        await self.gw.book.get(vhost)
        self.clean = c.clean_session
        stored = await self._session_at_connect()
        if self.closing:  # the client went while the router and the database answered
            await self._close_amqp()
            return
        previous = self.gw.clients.get((vhost, self.client_id))
        if previous is not None:
            previous._close("taken_over")  # 3.1.4: the newer connection wins
        self.gw.clients[(vhost, self.client_id)] = self
        if c.will_topic is not None:
            self.will = codec.Publish(c.will_topic, c.will_payload, min(c.will_qos, 1),
                                      c.will_retain)
        self.keep_alive = c.keep_alive
        self.connected = True
        self._settle()
        self.gw.admission.succeeded(self.source)
        metrics.connack(codec.ACCEPTED)
        metrics.CONNECTIONS.inc()
        self._write(codec.connack(codec.ACCEPTED, session_present=stored is not None))
        self._timer.cancel()
        self._timer = None
        if self.keep_alive:
            self._timer = self.gw.loop.call_later(self.keep_alive * 1.5, self._check_alive)
        logger.info("mqtt.connected", extra={"vhost": vhost, "client_id": self.client_id,
                                             "tls": self.tls, "clean_session": self.clean,
                                             "session_present": stored is not None})
        if stored:
            # the session's subscriptions again, before any packet that follows CONNECT
            addresses = await self.gw.book.get(vhost)
            for topic_filter, qos in stored.items():
                await self._subscribe_one(topic_filter, qos, addresses)

    async def _session_at_connect(self) -> dict | None:
        """The stored subscriptions of a persistent session, or None (and a clean session
        drops what an earlier persistent one left)."""
        if self.clean:
            await asyncio.to_thread(self.gw.control.drop_subscriptions, self.vhost, self.client_id,
                                    self._actor())
            return None
        return await asyncio.to_thread(self.gw.control.load_session, self.vhost, self.client_id)

    def _client_properties(self) -> dict:
        """The MQTT client behind the AMQP connection, as the space's connection list shows
        it (docs/api.md, "Connections")."""
        host = f"{self.peer[0]}:{self.peer[1]}" if self.peer else ""
        return {"maas-protocol": "mqtts" if self.tls else "mqtt",
                "maas-client-id": self.client_id, "maas-client-host": host}

    def _actor(self) -> str:
        return f"mqtt-gateway:{self.login}"

    async def _open_amqp(self, password: str) -> int:
        loop = self.gw.loop
        try:
            routers, tls = await self.gw.routers_for(self.vhost)
            for i, (host, port) in enumerate(routers):
                try:
                    _, self.amqp = await asyncio.wait_for(loop.create_connection(
                        lambda: AmqpConnection(self, self.login, password, self.vhost,
                                               f"mqtt-gateway-{uuid.uuid4().hex[:12]}",
                                               self._client_properties()),
                        host, port, ssl=tls,
                        server_hostname=host if tls is not None else None), OPEN_TIMEOUT)
                    await asyncio.wait_for(self.amqp.opened, OPEN_TIMEOUT)
                    break
                except (TimeoutError, OSError):
                    if i == len(routers) - 1:
                        raise
                    if self.amqp is not None:  # opened a socket that never answered
                        self.amqp.close()
                        self.amqp = None
                    # that router of the mesh is gone: the next one serves the space too
                    logger.info("mqtt.router_failover", extra={"vhost": self.vhost,
                                                               "router": f"{host}:{port}"})
        except LinkRefused as exc:
            # SASL refused: a wrong login, unless the space's router configuration is being
            # restored (qdrouterd passes the auth service's transient refusal on as `auth`).
            # The open refused: the login is not of this space.
            if "authentication" not in str(exc):
                return codec.NOT_AUTHORIZED
            restoring = await asyncio.to_thread(self.gw.control.restoring, self.vhost)
            return codec.UNAVAILABLE if restoring else codec.BAD_LOGIN
        except (TimeoutError, OSError):
            logger.warning("mqtt.router_unreachable", extra={"vhost": self.vhost})
            return codec.UNAVAILABLE
        return codec.ACCEPTED

    # -- publish ---------------------------------------------------------------------------------
    def _on_publish(self, p: codec.Publish) -> None:
        addresses = self.gw.book.cached(self.vhost)
        target = mapping.publish_target(p.topic, addresses) if addresses is not None else None
        if target is None:
            self._run(self._publish_after_lookup(p))
            return
        self._forward(p, *target)

    async def _publish_after_lookup(self, p: codec.Publish) -> None:
        addresses = await self.gw.book.get(self.vhost, fresh=True)
        target = mapping.publish_target(p.topic, addresses)
        if target is None:
            self._close("publish_refused", topic=p.topic, reason="no such address")
            return
        self._forward(p, *target)

    def _forward(self, p: codec.Publish, address: str, subject: str | None) -> None:
        metrics.MESSAGES.labels("in").inc()
        link = self.senders.get(address)
        if link is None:
            link = self.senders[address] = self.amqp.sender(address)
        body = encode(p.payload, subject, durable=p.qos > 0)
        if link.remote_max_message_size and len(body) > link.remote_max_message_size:
            # the space's largest message (its router said so at attach); MQTT 3.1.1's only
            # answer to a PUBLISH it refuses is to close the connection
            self._close("publish_refused", topic=p.topic, reason="message size exceeded",
                        size=len(body), limit=link.remote_max_message_size)
            return
        dlv = self.amqp.send(link, body, p.qos == 0)
        if link.queued > MAX_QUEUED and not self.flow_paused:
            # The router holds credit back (e.g. nobody consumes): stop reading this client
            # rather than queue without bound in the gateway.
            self.flow_paused = True
            self.sock.pause_reading()
            self.gw.loop.call_later(0.01, self._check_queued)
        if p.qos:
            self.unacked[dlv] = (codec.PUBACK if p.qos == 1 else codec.PUBREC, p.packet_id)
        if p.retain:
            self.gw.retain(self.vhost, p, link, self.amqp)

    def _check_queued(self) -> None:
        if self.closing:
            return
        if any(link.queued > MAX_QUEUED // 2 for link in self.senders.values()):
            self.gw.loop.call_later(0.01, self._check_queued)
            return
        self.flow_paused = False
        if not self.busy:
            self.sock.resume_reading()

    def on_outcome(self, dlv, state) -> None:
        entry = self.unacked.pop(dlv, None)
        if entry is None:
            return
        if state == Delivery.ACCEPTED:
            if entry[1] is not None:  # a will has no packet id
                self._write(codec.ack(*entry))
        else:
            # MQTT 3.1.1 has no negative PUBACK: closing makes the client send it again later.
            self._close("publish_not_accepted", outcome=str(state))

    def on_flow(self, link) -> None:
        pass

    # -- subscribe -------------------------------------------------------------------------------
    async def _on_subscribe(self, s: codec.Subscribe) -> None:
        addresses = await self.gw.book.get(self.vhost)
        codes, granted = [], []
        for topic_filter, qos in s.filters:
            self._unsubscribe(topic_filter)  # a repeated filter replaces the subscription
            sub = await self._subscribe_one(topic_filter, min(qos, 1), addresses)
            codes.append(codec.SUBACK_FAILURE if sub is None else sub.qos)
            if sub is not None:
                granted.append(sub)
        if not self.clean:
            await self._save_session()
        self._write(codec.suback(s.packet_id, codes))
        for sub in granted:
            sources = [self.receivers[link][1] for link in sub.links if link in self.receivers]
            for retained in await self.gw.retained(self.vhost, sub.filter):
                if not any(mapping.covers(src, retained.topic) for src in sources):
                    continue  # from an address this user may not receive from
                self._deliver(sub, retained.topic, retained.payload,
                              min(sub.qos, retained.qos), None, None, retain=True)

    async def _subscribe_one(self, topic_filter: str, qos: int, addresses: dict):
        """Receivers for one filter; the Subscription, or None when the router let none of
        them attach. A persistent session's QoS 1 filter reads topic addresses through durable
        subscription addresses of its own, which keep messages while the client is away."""
        sub = Subscription(topic_filter, qos)
        sources = mapping.subscription_sources(topic_filter, addresses)
        if not self.clean and qos:
            sources = [await self._durable(topic_filter, src) if src.topic else src
                       for src in sources]
        credit = INFLIGHT if sub.qos else QOS0_CREDIT
        links = [self.amqp.receiver(src.address, credit) for src in sources if src is not None]
        attached = [src for src in sources if src is not None]
        for link, src in zip(links, attached, strict=True):
            self.receivers[link] = (sub, src)
        answers = await asyncio.gather(*(self.amqp.link_open(link) for link in links),
                                       return_exceptions=True)
        for link, answer in zip(links, answers, strict=True):
            if isinstance(answer, LinkRefused):
                self.receivers.pop(link, None)
            else:
                sub.links.append(link)
        if not sub.links:
            logger.info("mqtt.subscribe_refused", extra={
                "vhost": self.vhost, "client_id": self.client_id, "filter": topic_filter,
                "reason": next((str(a) for a in answers if isinstance(a, Exception)),
                               "no such address")})
            return None
        self.subs[topic_filter] = sub
        return sub

    async def _durable(self, topic_filter: str, src: mapping.Source):
        """The durable source replacing a topic source: `<topic>::<name>`, once the agents have
        made it (None if the router still refuses it after SESSION_READY_TIMEOUT)."""
        name = store.durable_name(self.client_id, topic_filter, src.topic)
        try:
            await asyncio.to_thread(self.gw.control.ensure_subscription, self.vhost, src.topic, name,
                                    self._actor())
        except Exception as exc:  # a plan or quota refusal: say so, grant nothing there
            logger.warning("mqtt.session_subscription_refused", extra={
                "vhost": self.vhost, "client_id": self.client_id, "reason": str(exc)})
            return None
        durable = mapping.Source(f"{src.topic}::{name}", src.topic)
        deadline = time.monotonic() + SESSION_READY_TIMEOUT
        while not self.amqp.closed:
            link = self.amqp.receiver(durable.address, 0)
            try:
                await self.amqp.link_open(link)
            except LinkRefused:
                if time.monotonic() > deadline:
                    return None
                await asyncio.sleep(0.2)  # the agents have not configured it yet
                continue
            link.close()
            return durable
        return None

    async def _save_session(self) -> None:
        await asyncio.to_thread(self.gw.control.save_session, self.vhost, self.client_id,
                                {f: sub.qos for f, sub in self.subs.items()})

    async def _forget(self, packet: codec.Unsubscribe) -> None:
        """UNSUBSCRIBE in a persistent session: its durable subscriptions go too."""
        addresses = await self.gw.book.get(self.vhost)
        names = [store.durable_name(self.client_id, f, src.topic) for f in packet.filters
                 for src in mapping.subscription_sources(f, addresses) if src.topic]
        await asyncio.to_thread(self.gw.control.drop_subscriptions, self.vhost, self.client_id,
                                self._actor(), names)
        await self._save_session()
        self._write(codec.ack(codec.UNSUBACK, packet.packet_id))

    def _unsubscribe(self, topic_filter: str) -> None:
        sub = self.subs.pop(topic_filter, None)
        if sub is None:
            return
        for link in sub.links:
            self.receivers.pop(link, None)
            self.starved.discard(link)
            link.close()
        for pid, (link, dlv) in list(self.inflight.items()):
            if link in sub.links:
                del self.inflight[pid]
                dlv.update(Delivery.RELEASED)
                dlv.settle()

    def on_message(self, link, dlv, msg) -> None:
        entry = self.receivers.get(link)
        if entry is None or self.closing:
            dlv.update(Delivery.RELEASED)
            dlv.settle()
            return
        sub, src = entry
        key = (msg.annotations or {}).get("x-routing-key") or msg.subject
        topic = mapping.topic_of(src, key)
        if not mapping.matches(sub.filter, topic):
            logger.debug("mqtt.not_matched", extra={"filter": sub.filter, "topic": topic,
                                                     "annotations": str(msg.annotations),
                                                     "subject": msg.subject})
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            link.flow(1)
            return
        qos = sub.qos if not dlv.settled else 0
        self._deliver(sub, topic, _payload(msg.body), qos, link, dlv)

    def _deliver(self, sub, topic, payload, qos, link, dlv, retain=False) -> None:
        metrics.MESSAGES.labels("out").inc()
        if qos:
            self.next_id = self.next_id % 65535 + 1
            while self.next_id in self.inflight:
                self.next_id = self.next_id % 65535 + 1
            if dlv is not None:
                self.inflight[self.next_id] = (link, dlv)
            self._write(codec.publish(topic, payload, 1, self.next_id, retain))
            return
        self._write(codec.publish(topic, payload, 0, retain=retain))
        if dlv is not None:
            if not dlv.settled:
                dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            if self.write_paused:
                self.starved.add(link)
            else:
                link.flow(1)

    def _on_puback(self, packet_id: int) -> None:
        entry = self.inflight.pop(packet_id, None)
        if entry is None:
            return
        link, dlv = entry
        dlv.update(Delivery.ACCEPTED)
        dlv.settle()
        if link in self.receivers:
            link.flow(1)

    # -- AMQP side -------------------------------------------------------------------------------
    def on_link_closed(self, link, condition) -> None:
        if link.is_sender:
            for address, sender in list(self.senders.items()):
                if sender == link:  # proton wraps a link anew: compare, not identity
                    del self.senders[address]
                    # the router refused the sender: MQTT 3.1.1's only refusal of a PUBLISH
                    self._close("publish_refused", address=address, reason=condition)
        elif link in self.receivers:
            sub, src = self.receivers.pop(link)
            if link in sub.links:
                sub.links.remove(link)
                logger.warning("mqtt.receiver_lost", extra={
                    "vhost": self.vhost, "address": src.address, "reason": condition})

    def on_closed(self, condition) -> None:
        if not self.closing and self.connected:
            self._close("router_connection_lost", reason=str(condition))

    async def _close_amqp(self) -> None:
        """Close the AMQP connection once what the client published has left (a QoS 0 PUBLISH
        right before DISCONNECT may still wait for the router's credit)."""
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while (not self.amqp.closed and time.monotonic() < deadline
               and any(link.queued for link in self.senders.values())):
            await asyncio.sleep(0.01)
        self.amqp.close()

    async def _publish_will(self, will: codec.Publish) -> None:
        """The client went without DISCONNECT: its will goes out as it, then AMQP closes."""
        try:
            addresses = await self.gw.book.get(self.vhost)
            target = mapping.publish_target(will.topic, addresses)
            if target is None:
                logger.info("mqtt.will_refused", extra={"vhost": self.vhost, "topic": will.topic})
                return
            self.closing = False  # outcomes of the will are still wanted
            self.unacked.clear()
            self._forward(will, *target)
            link = self.senders[target[0]]
            await asyncio.wait_for(self.amqp.link_open(link), OPEN_TIMEOUT)
            if will.qos:
                deadline = time.monotonic() + OPEN_TIMEOUT
                while self.unacked and time.monotonic() < deadline and not self.amqp.closed:
                    await asyncio.sleep(0.01)
            logger.info("mqtt.will_published", extra={"vhost": self.vhost, "topic": will.topic,
                                                      "client_id": self.client_id})
        except (TimeoutError, LinkRefused) as exc:
            logger.info("mqtt.will_refused", extra={"vhost": self.vhost, "topic": will.topic,
                                                    "reason": str(exc)})
        finally:
            self.closing = True
            await self._close_amqp()


def _payload(body) -> bytes:
    """An AMQP body as MQTT bytes: binary as it is, text as UTF-8, anything else as JSON."""
    if body is None:
        return b""
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8")
    return json.dumps(body, default=str).encode("utf-8")
