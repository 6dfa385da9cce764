"""The data plane's control interface (dataplane/control.py) on the Django apps: logins checked
against the messaging users of the database, and the MQTT gateway's addresses, retained
messages, persistent sessions and durable subscriptions.

Logins: no address-authz. qdrouterd 1.19 turns anonymous senders on for a connection whose
permissions come from the auth service and checks their messages' `to` as written, but routes
it after dropping a `scheme:/` head, so a prefix grant (`news/*`) would reach the router's own
`_local/$management`. The agent's per-space vhost policy carries the address rules instead
(anonymous senders off), on qdrouterd and the embedded router alike (docs/router.md).

The gateway's calls each run in a worker thread (`asyncio.to_thread`): Django's ORM is
synchronous."""
import hashlib
import hmac
import secrets
import threading
import time
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import close_old_connections
from django.db.models import Max

from config_service import services
from config_service.models import Address, AddressSpace, AgentState, MessagingUser
from config_service.passwords import verify_password
from core.context import Context
from dataplane.control import Identity, Retained
from dataplane.gateway.mapping import matches
from dataplane.gateway.store import durable_prefix
from eventlog.models import ConfigEvent
from workers.models import MqttSession, RetainedMessage

# -- logins --------------------------------------------------------------------------------------
# The config events after which a kept login may no longer hold: its user's password or rules
# changed, a user of its name came or went, its space or tenant went.
_CHANGES = ("messaging_user.created", "messaging_user.updated", "messaging_user.deleted",
            "address_space.deleted", "address_space.removed", "tenant.deleted")


@dataclass(frozen=True)
class _Kept:
    digest: bytes  # of the password, salted per process
    identity: Identity
    space_uid: uuid.UUID
    tenant_uid: uuid.UUID  # the uid of the tenant's stream
    username: str


class Logins:
    """dataplane.control.Verifier on the database, for the auth service's few verifying threads
    (each keeps its database connection from one login to the next).

    A login it verified is kept (its password's salted digest, never the password), so that the
    same client's next login reads nothing but what changed: at most once a second, one indexed
    read of the config log since the last, after which every kept login of a space whose users
    changed, or of a deleted space or tenant, is dropped before it is trusted again. What was
    read is read again for LATE seconds, so that a change committed after a later one (its
    position is older) is not missed. A refused login is not kept: each is checked, and the
    auth service delays the next try of that name (dataplane/authservice/server.py)."""

    POLL_EVERY = 1.0  # seconds between two reads of what changed
    FRESH = 2 * POLL_EVERY  # how old that read may be for `cached` to answer
    LATE = 10.0  # seconds a change may take from its position to its commit
    CAPACITY = 100_000  # logins kept, the oldest dropped first

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._salt = secrets.token_bytes(16)
        self._kept: dict[str, _Kept] = {}
        self._tops: list[tuple[float, int]] = []  # (when, the log's last position then)
        self._polled = float("-inf")
        self._restoring: frozenset[str] = frozenset()  # vhosts whose router configuration is
        self._asked: set[str] = set()  # being restored, and those of them logins came for

    def __call__(self, login: str, password: str) -> Identity | None:
        """The identity of `user@vhost`, of a bare `user` whose password matches in exactly
        one space, or of the router admin; None if the login is refused."""
        close_old_connections()  # one past CONN_MAX_AGE, or broken, is replaced
        admin = _admin(login, password)
        if admin is not None:
            return admin
        self._forget_changed()
        digest = self._digest(password)
        with self._lock:
            kept = self._kept.get(login)
        if kept is not None and hmac.compare_digest(kept.digest, digest):
            return kept.identity
        user = _messaging_user(login, password)
        if user is None:
            return None
        kept = _Kept(digest, Identity(sub=f"{user.username}@{user.space.vhost}",
                                      preferred_username=user.username),
                     user.space.uid, user.space.tenant.uid, user.username)
        with self._lock:
            self._kept.pop(login, None)
            self._kept[login] = kept
            while len(self._kept) > self.CAPACITY:
                del self._kept[next(iter(self._kept))]
        return kept.identity

    def unavailable(self, identity: Identity) -> bool:
        """Whether the identity's space is having its router configuration restored (a router
        restarted without it, and the router watch has not yet given it back): its login is
        refused as a transient failure, not let in to a router that would refuse its links,
        and the space is asked to be restored first. Read with what changed (POLL_EVERY)."""
        vhost = _vhost_of(identity)
        with self._lock:
            if vhost not in self._restoring:
                return False
            self._asked.add(vhost)
        return True

    def _read_restoring(self) -> None:
        from workers.agents.router import watch  # the data plane's layer reads the agents'

        try:
            restoring = watch.restoring_vhosts()
        except Exception:  # noqa: BLE001 - an unreadable state must not refuse anyone
            restoring = frozenset()
        with self._lock:
            self._restoring, asked, self._asked = restoring, self._asked, set()
        if asked:
            try:
                watch.ask_first(asked)
            except Exception:  # noqa: BLE001 - the order is a courtesy; logins go on without it
                pass

    def cached(self, login: str, password: str) -> Identity | None:
        """The identity of a login kept, from memory alone (the auth service asks on its event
        loop, before its threads), or None: then ask the verifier itself. Only while what
        changed was read within FRESH seconds; after that the verifier's next call reads it."""
        digest = self._digest(password)
        with self._lock:
            if self.clock() - self._polled > self.FRESH:
                return None
            kept = self._kept.get(login)
            if kept is not None and _vhost_of(kept.identity) in self._restoring:
                return None  # the verifier's thread reads anew whether it is back
        if kept is not None and hmac.compare_digest(kept.digest, digest):
            return kept.identity
        return None

    def _digest(self, password: str) -> bytes:
        return hashlib.sha256(self._salt + password.encode("utf-8", "surrogatepass")).digest()

    def forget(self) -> None:
        """Drops every kept login (tests)."""
        with self._lock:
            self._kept.clear()

    def _forget_changed(self) -> None:
        now = self.clock()
        with self._lock:
            if now - self._polled < self.POLL_EVERY:
                return
            self._polled = now
            settled = [entry for entry in self._tops if now - entry[0] >= self.LATE]
            recent = [entry for entry in self._tops if now - entry[0] < self.LATE]
            # from the last position seen LATE seconds ago (or the oldest seen, early on)
            read_from = (settled or recent or [(0.0, None)])[-1 if settled else 0][1]
        top = ConfigEvent.objects.aggregate(top=Max("position"))["top"] or 0
        changed = [] if read_from is None else list(
            ConfigEvent.objects.filter(position__gt=read_from, position__lte=top,
                                       type__in=_CHANGES)
            .values_list("stream_id", "payload__username"))
        streams = {stream for stream, _ in changed}
        names = {name for _, name in changed if name}
        self._read_restoring()
        with self._lock:
            self._tops = settled[-1:] + recent + [(now, top)]
            if not changed:
                return
            for login in [login for login, kept in self._kept.items()
                          if kept.space_uid in streams or kept.tenant_uid in streams
                          or ("@" not in login and kept.username in names)]:
                del self._kept[login]


def _vhost_of(identity: Identity) -> str:
    """The space of a messaging user's identity (`user@vhost`)."""
    return identity.sub.rpartition("@")[2]


verify = Logins()


def _admin(login: str, password: str) -> Identity | None:
    user, secret = settings.MAAS_ROUTER_ADMIN_USER, settings.MAAS_ROUTER_ADMIN_PASSWORD
    if not user or not secret or login != user:
        return None
    if not hmac.compare_digest(password.encode("utf-8"), secret.encode("utf-8")):
        return None
    return Identity(sub=user, preferred_username=user)


def _messaging_user(login: str, password: str) -> MessagingUser | None:
    """The one messaging user `login` names whose password matches, with its space and
    tenant; a bare login names nobody if its password fits users of several spaces."""
    username, at, vhost = login.rpartition("@")
    users = MessagingUser.objects.select_related("space__tenant").filter(
        space__terminating=False, space__tenant__deleted_at__isnull=True)
    if at:
        slug, dot, space = vhost.partition(".")  # neither slugs nor space names have a dot
        if not dot:
            return None
        users = users.filter(username=username, space__tenant__slug=slug, space__name=space)
    else:
        users = users.filter(username=login)
    matching = [u for u in users if verify_password(password, u.password_hash)]
    return matching[0] if len(matching) == 1 else None


# -- TLS listeners: a space endpoint's certificate by SNI name (dataplane/server_names.py) ------
def space_certificate(host: str) -> tuple[str, str] | None:
    """(chain, key) PEM of the space endpoint whose host is `host`, or None; for the
    listeners that reach the database (the MQTT gateway, `manage.py run_vhost_relay`)."""
    from workers import certificates

    close_old_connections()
    return certificates.for_host(host)


# -- the MQTT gateway ----------------------------------------------------------------------------
def _space(vhost: str) -> AddressSpace | None:
    slug, _, name = vhost.partition(".")
    return AddressSpace.objects.filter(tenant__slug=slug, name=name, type="standard",
                                       terminating=False).first()


class GatewayStore:
    """dataplane.control.GatewayStore on the control plane's database."""

    def addresses(self, vhost: str) -> dict[str, str]:
        close_old_connections()
        slug, _, name = vhost.partition(".")
        rows = Address.objects.filter(space__tenant__slug=slug, space__name=name,
                                      space__terminating=False, space__type="standard")
        return dict(rows.values_list("address", "type"))

    def certificate(self, host: str) -> tuple[str, str] | None:
        return space_certificate(host)

    def restoring(self, vhost: str) -> bool:
        from workers.agents.router import watch

        close_old_connections()
        slug, _, name = vhost.partition(".")
        uid = AddressSpace.objects.filter(tenant__slug=slug, name=name).values("uid")
        return AgentState.objects.filter(kind=watch.KIND, space_uid__in=uid).exclude(
            invalidated="").exists()

    def router_of(self, vhost: str, default: tuple[str, int]) -> tuple[str, int]:
        """On Kubernetes the space's own routers' internal listener, TLS with a certificate of
        the internal CA for their headless Service's name (workers/infra), otherwise the one
        router of the machine (`default`)."""
        if settings.MAAS_INFRA_BACKEND != "kubernetes":
            return default
        from workers.infra import manifests as m
        from workers.infra.backend import infra_settings

        close_old_connections()
        slug, _, name = vhost.partition(".")
        uid = AddressSpace.objects.filter(tenant__slug=slug, name=name, type="standard") \
            .values_list("uid", flat=True).first()
        if uid is None:
            return default  # no such space: the router refuses the login anyway
        internal = f"{m.router_name(m.infra_id(str(uid)))}-internal"
        return m.service_host(internal, infra_settings()), m.ROUTER_INTERNAL_PORT

    def save_retained(self, vhost: str, topic: str, payload: bytes, qos: int) -> None:
        """An empty payload removes the topic's retained message (3.1.1 section 3.3.1.3)."""
        close_old_connections()
        space = _space(vhost)
        if space is None:
            return
        if not payload:
            RetainedMessage.objects.filter(space_uid=space.uid, topic=topic).delete()
            return
        RetainedMessage.objects.update_or_create(space_uid=space.uid, topic=topic,
                                                 defaults={"payload": payload, "qos": qos})

    def load_retained(self, vhost: str, topic_filter: str) -> list[Retained]:
        close_old_connections()
        space = _space(vhost)
        if space is None:
            return []
        # by the uid: a space deleted and made again under its name does not see the old ones
        rows = RetainedMessage.objects.filter(space_uid=space.uid)
        head = topic_filter.split("/", 1)[0]
        if head not in ("+", "#"):
            rows = rows.filter(topic__startswith=head)
        return [Retained(r.topic, bytes(r.payload), r.qos) for r in rows.order_by("topic")
                if matches(topic_filter, r.topic)]

    def load_session(self, vhost: str, client_id: str) -> dict | None:
        close_old_connections()
        space = _space(vhost)
        if space is None:
            return None
        row = MqttSession.objects.filter(space_uid=space.uid, client_id=client_id).first()
        return None if row is None else dict(row.subscriptions)

    def save_session(self, vhost: str, client_id: str, subscriptions: dict) -> None:
        close_old_connections()
        space = _space(vhost)
        if space is not None:
            MqttSession.objects.update_or_create(space_uid=space.uid, client_id=client_id,
                                                 defaults={"subscriptions": subscriptions})

    def ensure_subscription(self, vhost: str, topic: str, name: str, actor: str) -> None:
        """Made through the service function (a config event; the agents give it its broker
        queue) if the space does not have it."""
        close_old_connections()
        space = _space(vhost)
        if space is None or Address.objects.filter(space=space, address=name).exists():
            return
        services.create_address(ctx=Context(actor=actor), space=space, address=name,
                                type="subscription", plan=settings.MAAS_MQTT_SESSION_PLAN,
                                topic=topic)

    def drop_subscriptions(self, vhost: str, client_id: str, actor: str,
                           names: list[str] | None = None) -> None:
        close_old_connections()
        space = _space(vhost)
        if space is None:
            return
        if names is None:
            MqttSession.objects.filter(space_uid=space.uid, client_id=client_id).delete()
        rows = Address.objects.filter(space=space, type="subscription",
                                      address__startswith=durable_prefix(client_id))
        if names is not None:
            rows = rows.filter(address__in=list(names))
        for name in list(rows.values_list("name", flat=True)):
            services.delete_address(ctx=Context(actor=actor), space=space, name=name)
