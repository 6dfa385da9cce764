"""Draining a broker before it is removed, so that no stored message is lost.

EnMasse kept a removed broker's queues Draining (router autoLink `in` only) until their message
count on it was 0. With RabbitMQ the messages are moved instead: for every non-empty queue of
the space's vhost on the leaving broker, a dynamic shovel (`src-delete-after: queue-length`)
moves what is stored to the same queue on the remaining broker its address is placed on now
(the first remaining one for a queue no address wants); the broker is reported
empty, and only then deleted, once every queue of the vhost there holds no message (consumers
may drain it too). With no broker left (every stored address deleted), nothing is kept.

The count is the management API's `messages`, a statistic: it shows a queue as it was up to one
statistics interval ago (emission and copy, 10 s at RabbitMQ's defaults). So an empty count is
believed only once it was read `settle` seconds after draining began; before that the drainer
reports DRAIN_SETTLING, so that a message stored just before the router stopped sending there
still shows.

Everything goes over TLS, as the brokers listen with nothing else: the API over HTTPS checked
against the internal CA bundle (`ca`), and each shovel from the leaving broker's own node (a
direct connection, no network) to the target's AMQPS listener, which the leaving broker checks
against the bundle its pod mounts, by the target's name.
"""
import logging
import time
from urllib.parse import quote

from workers.clients.rabbitmq_api import BrokerError, RabbitMQApi
from workers.infra import manifests as m
from workers.infra.controller import DRAIN_SETTLING, DRAIN_UNREACHABLE

logger = logging.getLogger(__name__)

SHOVEL_PREFIX = "maas-drain-"
# Twice RabbitMQ's default statistics lag (5 s emission + 5 s copy): its brokers on Kubernetes
# keep the defaults (a broker copying less often needs a longer settle).
SETTLE_SECONDS = 20.0
# A drain not asked about for this long is a new one (the broker was wanted again in between,
# then removed again): its clock starts over. Far above the time between two reconciles of a
# draining space, which is at most its drift check period (5 minutes at the default
# MAAS_RESYNC_INTERVAL; workers/tasks.py).
STALE_SECONDS = 3600.0


def _amqp_uri(host: str, port: int, user: str, password: str, vhost: str,
              tls: bool = False) -> str:
    uri = (f"amqp{'s' if tls else ''}://{quote(user, safe='')}:{quote(password, safe='')}@"
           f"{host}:{port}/{quote(vhost, safe='')}")
    if tls:  # RabbitMQ's URI options (Erlang's ssl): the target's chain and name checked
        uri += (f"?cacertfile={quote(f'{m.BROKER_TLS_DIR}/{m.CA_FILE}', safe='/')}"
                f"&verify=verify_peer&server_name_indication={host}")
    return uri


def _local_uri(vhost: str) -> str:
    """The leaving broker's own vhost through a direct (in-node) connection: RabbitMQ's
    `amqp://` without a host, which needs no listener."""
    return f"amqp:///{quote(vhost, safe='')}"


class RabbitMQDrainer:
    def __init__(self, cfg: m.InfraSettings, admin_password, timeout: float = 10,
                 user: str = m.BROKER_ADMIN_USER, host_of=None,
                 settle: float = SETTLE_SECONDS, stale: float = STALE_SECONDS,
                 clock=time.monotonic, management_port: int = m.BROKER_MANAGEMENT_PORT,
                 amqp_port: int = m.BROKER_AMQPS_PORT, tls: bool = True, ca=None,
                 placed=None):
        """`admin_password(infra)` returns the brokers' admin password of a space;
        `host_of(space, cluster_id)` a broker's host (default: its Service), which listens on
        `management_port` and `amqp_port` (the broker pods' ports), with TLS (`tls`: HTTPS
        and AMQPS, checked against the CA file `ca()` names; plain only for a test broker).
        `placed(space, queue)`: the clusterIds the space's address of that broker queue is
        placed on now, () for none (default: none known); its messages go to the first of
        them that is a target, else to the first target."""
        self.cfg, self.admin_password, self.timeout = cfg, admin_password, timeout
        self.user, self.settle, self.stale, self.clock = user, settle, stale, clock
        self.management_port, self.amqp_port, self.tls = management_port, amqp_port, tls
        self.ca = ca or (lambda: None)
        self.placed = placed or (lambda space, queue: ())
        self.host_of = host_of or (
            lambda space, cluster: m.service_host(m.broker_name(space.infra, cluster), cfg))
        # (began, last asked) of each (space, broker) this process drains. Kept in memory only:
        # a restarted controller waits `settle` again, which is never unsafe.
        self._asked: dict[tuple[str, str], tuple[float, float]] = {}

    def drain(self, space: m.SpaceInfra, cluster_id: str, targets: tuple[str, ...]) -> int:
        """The messages still stored on the leaving broker (0: it may be deleted), or
        DRAIN_UNREACHABLE or DRAIN_SETTLING (keep it)."""
        key, now = (space.uid, cluster_id), self.clock()
        began, last = self._asked.get(key, (now, now))
        if now - last > self.stale:
            began = now
        self._asked[key] = (began, now)
        left, counted = self._count_and_move(space, cluster_id, targets)
        if left == 0 and counted and self.clock() - began < self.settle:
            return DRAIN_SETTLING
        if left == 0:
            del self._asked[key]  # drained: the broker goes
        return left

    def _count_and_move(self, space: m.SpaceInfra, cluster_id: str,
                        targets: tuple[str, ...]) -> tuple[int, bool]:
        """(messages left, whether that is the statistics' count): a vhost that is not there,
        or no broker to keep the messages for, is known at once."""
        password = self.admin_password(space.infra)
        host = self.host_of(space, cluster_id)
        api = RabbitMQApi(f"{'https' if self.tls else 'http'}://{host}:{self.management_port}"
                          f"/api", self.user, password, timeout=self.timeout, ca=self.ca())
        vhost = quote(space.vhost, safe="")
        try:
            if api.request("GET", f"/vhosts/{vhost}", missing_ok=True) is None:
                return 0, False  # the storage agent never created the vhost there
            queues = api.listing(f"/queues/{vhost}", params={"columns": "name,messages"})
            left = sum(int(q.get("messages") or 0) for q in queues)
            if not targets:
                return 0, False  # no stored address is left in the space: nothing to keep
            src = _local_uri(space.vhost) if self.tls else _amqp_uri(
                "localhost", self.amqp_port, self.user, password, space.vhost)
            for q in queues:
                if int(q.get("messages") or 0) > 0:
                    # To the broker the queue's address is placed on now, where the storage
                    # controller keeps it (a queue elsewhere would be an unknown one there);
                    # a queue no address wants any more to the first broker, as ever.
                    target = next((c for c in self.placed(space, q["name"]) if c in targets),
                                  targets[0])
                    dest = _amqp_uri(self.host_of(space, target), self.amqp_port, self.user,
                                     password, space.vhost, self.tls)
                    self._shovel(api, space, cluster_id, q["name"], src, dest)
            return left, True
        except BrokerError as exc:
            logger.warning("infra.drain_unreachable", extra={"space": space.uid,
                                                             "broker": cluster_id,
                                                             "error": str(exc)})
            return DRAIN_UNREACHABLE, False  # keep the broker, try again on the next reconcile
        finally:
            api.close()

    @staticmethod
    def _shovel(api: RabbitMQApi, space, cluster_id: str, queue: str, src: str, dest: str):
        """Starts moving `queue`'s messages once; without the shovel plugin the broker refuses,
        and the queue is left for its consumers to drain (EnMasse's way)."""
        vhost = quote(space.vhost, safe="")
        path = f"/parameters/shovel/{vhost}/{quote(SHOVEL_PREFIX + queue, safe='')}"
        try:
            if api.request("GET", path, missing_ok=True) is not None:
                return
            api.request("PUT", path, body={"value": {
                "src-protocol": "amqp091", "src-uri": src, "src-queue": queue,
                "src-delete-after": "queue-length",
                "dest-protocol": "amqp091", "dest-uri": dest, "dest-queue": queue,
                "ack-mode": "on-confirm",
            }})
        except BrokerError as exc:
            if exc.transient:
                raise
            logger.warning("infra.shovel_refused", extra={"space": space.uid,
                                                          "broker": cluster_id, "queue": queue,
                                                          "error": str(exc)})
            return
        logger.info("infra.shovel_started", extra={"space": space.uid, "broker": cluster_id,
                                                   "queue": queue})
