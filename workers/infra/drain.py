"""Draining a broker before it is removed, so that no stored message is lost.

EnMasse kept a removed broker's queues Draining (router autoLink `in` only) until their message
count on it was 0. With RabbitMQ the messages are moved instead: for every non-empty queue of
the space's vhost on the leaving broker, a dynamic shovel (`src-delete-after: queue-length`)
moves what is stored to the same queue on the first remaining broker; the broker is reported
empty, and only then deleted, once every queue of the vhost there holds no message (consumers
may drain it too). With no broker left (every stored address deleted), nothing is kept.
"""
import logging
from urllib.parse import quote

from ..storage.rabbitmq import BrokerError, RabbitMQApi
from . import manifests as m

logger = logging.getLogger(__name__)

SHOVEL_PREFIX = "maas-drain-"


def _amqp_uri(host: str, user: str, password: str, vhost: str) -> str:
    return (f"amqp://{quote(user, safe='')}:{quote(password, safe='')}@{host}:"
            f"{m.BROKER_AMQP_PORT}/{quote(vhost, safe='')}")


class RabbitMQDrainer:
    def __init__(self, cfg: m.InfraSettings, admin_password, timeout: float = 10,
                 user: str = m.BROKER_ADMIN_USER, host_of=None):
        """`admin_password(infra)` returns the brokers' admin password of a space;
        `host_of(space, cluster_id)` a broker's host (default: its Service)."""
        self.cfg, self.admin_password, self.timeout = cfg, admin_password, timeout
        self.user = user
        self.host_of = host_of or (
            lambda space, cluster: m.service_host(m.broker_name(space.infra, cluster), cfg))

    def drain(self, space: m.SpaceInfra, cluster_id: str, targets: tuple[str, ...]) -> int:
        password = self.admin_password(space.infra)
        api = RabbitMQApi(f"http://{self.host_of(space, cluster_id)}:{m.BROKER_MANAGEMENT_PORT}"
                          f"/api", self.user, password, timeout=self.timeout)
        vhost = quote(space.vhost, safe="")
        try:
            if api.request("GET", f"/vhosts/{vhost}", missing_ok=True) is None:
                return 0  # the storage agent never created the vhost there: nothing stored
            queues = api.request("GET", f"/queues/{vhost}",
                                 params={"columns": "name,messages"}) or []
            left = sum(int(q.get("messages") or 0) for q in queues)
            if not targets:
                return 0  # no stored address is left in the space: nothing to keep
            dest = _amqp_uri(self.host_of(space, targets[0]), self.user, password, space.vhost)
            src = _amqp_uri("localhost", self.user, password, space.vhost)
            for q in queues:
                if int(q.get("messages") or 0) > 0:
                    self._shovel(api, space, cluster_id, q["name"], src, dest)
            return left
        except BrokerError as exc:
            logger.warning("infra.drain_unreachable", extra={"space": space.uid,
                                                             "broker": cluster_id,
                                                             "error": str(exc)})
            return -1  # unknown: keep the broker, try again on the next reconcile
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
