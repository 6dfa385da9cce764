"""The storage controller agent: turns a space's projections into a RabbitMQ vhost state.

Credits decide how many brokers a space needs (the placement recorded on each address); with
one local RabbitMQ every placement maps to the same server, one vhost per address space.
"""
import hashlib
import logging
import os
import time

from django.conf import settings
from django.core.cache import cache

from config_service.models import Address, AddressSpace, AgentState
from config_service.models.projections import broker_object_name
from config_service.status import ROUTER_ONLY_TYPES
from config_service.validation import STORED_TYPES
from eventlog.models import ConfigEvent
from workers import certificates, credentials, endpoints
from workers.agents import statements
from workers.agents.runner import (
    Agent,
    Report,
    TransientError,
    agent_state,
    drift_check,
    only_creates,
    pending_events,
)
from workers.agents.storage import changed_vhosts, rabbitmq
from workers.agents.storage.desired import BrokerQueue, BrokerTopic, BrokerUser, VhostState
from workers.naming import broker_username

logger = logging.getLogger(__name__)

NEW_QUEUE_TYPES = ("queue", "deadletter")  # those the short path makes (`new_queues_only`)
# The short path reads each new queue's three objects by name, twice, and makes them one call
# each: for more new queues than this (a list of addresses), the full apply's listings and
# import are fewer calls. Each call by name costs the broker the same however many vhosts it
# holds; a listing or an import costs more the more it holds (docs/scale.md, "Brokered spaces
# at fleet scale"), hence many more than the 4 that paid on a broker of a few vhosts.
NEW_QUEUES_BY_NAME = 32


def effective_ttl(plan_ttl: dict, address_ttl: dict) -> int | None:
    """EnMasse: the tighter maximum wins; values below 1 are ignored."""
    maxima = [v for v in ((plan_ttl or {}).get("maximum"), (address_ttl or {}).get("maximum"))
              if v and v >= 1]
    return min(maxima) if maxima else None


def effective_attempts(plan_redelivery: dict, address_redelivery: dict) -> int | None:
    value = (address_redelivery or {}).get("maximumDeliveryAttempts")
    if value is None:
        value = (plan_redelivery or {}).get("maximumDeliveryAttempts")
    return value if value and value > 0 else None


def max_length_bytes(address: Address) -> int | None:
    """EnMasse's per-address memory cap: broker credit / partitions x globalMaxSize."""
    credit = float(address.plan_status.get("resources", {}).get("broker", 0) or 0)
    if credit <= 0 or address.space.type != "standard":
        return None
    partitions = max(len(address.placement), 1)
    return int(credit / partitions * settings.MAAS_BROKER_GLOBAL_MAX_SIZE)


def stored_addresses(space: AddressSpace) -> list[Address]:
    """The space's scheduled addresses that live on a broker, by name."""
    addresses = Address.objects.filter(space=space, scheduled=True, type__in=STORED_TYPES)
    return list(addresses.select_related("space").order_by("name"))


def tenant_throttled(space: AddressSpace) -> bool:
    # Read at every reconcile: a throttle changes no config event, it wakes the agents.
    return statements.throttle_and_plan_policy(space)[0]


def desired_state(space: AddressSpace, addresses: list[Address] | None = None,
                  broker: endpoints.BrokerEndpoint | None = None) -> VhostState:
    """The space's vhost on `broker` (its first, by default) with `addresses` (every stored
    address of the space, by default)."""
    broker = broker or endpoints.of(space).broker
    state = VhostState(vhost=space.vhost, throttled=tenant_throttled(space),
                       max_connections=space.plan_status.get("maxConnections"),
                       mqtt_queue_max_bytes=settings.MAAS_BROKER_MQTT_QUEUE_MAX_BYTES or None,
                       queue_exchanges=space.type != "standard",
                       replicated=broker.cluster)
    for a in stored_addresses(space) if addresses is None else addresses:
        if a.type == "topic":
            ttl = effective_ttl(a.plan_status.get("messageTtl"), a.spec.get("messageTtl"))
            state.topics.append(BrokerTopic(name=a.address, deadletter=a.deadletter or None,
                                            expiry=a.expiry or None, ttl_ms=ttl))
            continue
        state.queues.append(broker_queue(a))
    state.users = desired_users(space)
    return state


def broker_queue(a: Address) -> BrokerQueue:
    """The broker queue of a queue, subscription or deadletter address."""
    ps, spec = a.plan_status, a.spec
    return BrokerQueue(
        name=a.broker_object_name,
        kind=a.type,
        topic=a.topic or None,
        deadletter=a.deadletter or None,
        expiry=a.expiry or None,
        ttl_ms=effective_ttl(ps.get("messageTtl"), spec.get("messageTtl")),
        max_delivery_attempts=effective_attempts(ps.get("messageRedelivery"),
                                                 spec.get("messageRedelivery")),
        max_length_bytes=max_length_bytes(a),
        max_consumers=spec.get("subscription", {}).get("maxConsumers"),
    )


def desired_users(space: AddressSpace) -> list[BrokerUser]:
    """A brokered space's messaging users as broker users; a standard space's broker has one
    user, the router's own login: its clients reach it through the router alone, where the
    space's limits apply, never past them on the broker."""
    if space.type == "standard":
        return [router_broker_user(space)]
    users = []
    for user in statements.messaging_users(space):
        send, recv, manage, view = [], [], False, False
        for rule in user.authorization:
            ops = set(rule["operations"])
            if "send" in ops:
                send += rule["addresses"]
            if "recv" in ops:
                recv += rule["addresses"]
            manage = manage or "manage" in ops
            view = view or "view" in ops
        users.append(BrokerUser(
            username=broker_username(space.vhost, user.username), password_hash=user.password_hash,
            send=tuple(send), recv=tuple(recv), manage=manage, view=view,
            max_connections=settings.MAAS_BROKER_MAX_CONNECTIONS_PER_USER or None,
            max_channels=settings.MAAS_BROKER_MAX_CHANNELS_PER_USER or None,
        ))
    return users


def router_broker_user(space: AddressSpace) -> BrokerUser:
    """The router's own login on the space's vhost, for its autoLinks and linkRoutes."""
    user, password = credentials.router_broker(space.vhost)
    salt = hashlib.sha256(space.vhost.encode()).digest()[:4]  # stable: no needless updates
    return BrokerUser(
        username=broker_username(space.vhost, user),
        password_hash=rabbitmq.hash_password(password, salt),
        send=("*",), recv=("*",), router=True,
    )


_apis: dict[tuple, rabbitmq.RabbitMQApi] = {}


def management_api(broker: endpoints.BrokerEndpoint) -> rabbitmq.RabbitMQApi:
    """One keep-alive HTTP session per broker and process (made after a fork, never
    inherited), shared by the agent's threads: a connection per reconcile would cost a TCP
    set-up each time."""
    key = (os.getpid(), broker.api_url, broker.api_user, broker.api_password,
           broker.broker_ca or None)  # an https API's CA (Kubernetes: the internal CA)
    api = _apis.get(key)
    if api is None:
        for stale in [k for k in _apis if k[0] != key[0]]:
            del _apis[stale]  # a parent's sessions, inherited by a fork: never used here
        api = _apis[key] = rabbitmq.RabbitMQApi(*key[1:4], ca=key[4])
    return api


TOPIC_KIND_TTL = 3600  # seconds every worker reuses a broker's topic exchange type


def topic_kind_key(api: rabbitmq.RabbitMQApi) -> str:
    """The cache key of a broker's topic exchange type."""
    return "maas:storage:topic-kind:" + hashlib.sha256(api.base_url.encode()).hexdigest()[:16]


def topic_kind(api: rabbitmq.RabbitMQApi) -> str:
    """The broker's topic exchange type, asked once an hour for all worker processes: the
    question is RabbitMQ's `/api/overview`, which works out the whole broker (7 s at 600
    vhosts, 26 s at 500 busy ones, measured) and timed out on a busy one, failing every apply
    that asked it. The answer is kept with no expiry: when the hour is up and the broker does
    not answer, the last answer stands (its plugins did not change meanwhile); an expiring key
    had every fresh worker fail its applies from the hour on."""
    key = topic_kind_key(api)
    known = cache.get(key)  # (kind, asked at)
    if isinstance(known, str):
        known = (known, 0.0)  # kept by an earlier release, bare: ask again, or use it
    if known is not None and time.time() - known[1] < TOPIC_KIND_TTL:
        return known[0]
    try:
        kind = rabbitmq.topic_type(api)
    except rabbitmq.BrokerError:
        if known is None:
            raise
        return known[0]
    cache.set(key, (kind, time.time()), None)
    return kind


class StorageController(Agent):
    kind = "storage"
    unaffected_types = ROUTER_ONLY_TYPES  # the router alone carries them (`nothing_to_store`)

    def reconcile(self, space: AddressSpace) -> Report:
        if space.type == "brokered":
            # A brokered space's AMQPS and MQTTS listeners are its relays': its endpoints'
            # certificates go where they read them (a standard space's: the router agent).
            try:
                certificates.publish(space)
            except certificates.CertificateError as exc:
                return Report(space_error=str(exc))
        events = pending_events(space.uid, self.kind)
        state = agent_state(space.uid, self.kind)
        unchanged = nothing_to_store(events, state)
        if unchanged is not None:
            return unchanged
        where = endpoints.of(space)
        if len(where.brokers) == 1:
            added = self._add_queues(space, new_queues_only(events, state), where.broker)
            if added is not None:
                return added
        # A drift check, a resync with no new event or an invalidated state looks for drift the
        # events cannot tell of: stale users without permissions, found by a read of all the
        # broker's users.
        thorough = (events == [] or drift_check()
                    or bool(state is not None and state.invalidated))
        errors: dict = {}
        problems: list = []
        # Each broker of the space with the addresses placed on it (Kubernetes: the space's
        # own brokers; one machine: its one broker of the pool, every address).
        for broker, addresses in where.partition(stored_addresses(space)):
            api, changed = management_api(broker), True
            try:
                result = rabbitmq.BrokerReconciler(api, topic_kind(api)).apply(
                    desired_state(space, addresses, broker), thorough=thorough)
                changed = result.changed
            except rabbitmq.BrokerError as exc:
                if exc.transient:
                    raise TransientError(str(exc)) from exc
                return Report(space_error=f"Broker refused the configuration: {exc}",
                              checked=False)
            finally:
                if changed:  # or halfway: the usage sampler lists the vhost's objects again
                    changed_vhosts.mark(api.base_url, space.vhost)
            if result.transient:
                raise TransientError("; ".join(result.vhost_errors) or "broker busy, retrying")
            errors.update({
                a.name: {"message": result.errors.get(a.broker_object_name)
                         or "Not yet verified on the broker", "permanent": False}
                for a in addresses if not result.is_active(a.broker_object_name)})
            errors.update(self._purge(api, space, {a.name: a for a in addresses}))
            problems += result.vhost_errors + [f"user {u}: {m}"
                                               for u, m in result.user_errors.items()]
        # Only a thorough apply is a drift check: a change's own apply leaves stale users be.
        return Report(address_errors=errors, space_error="; ".join(problems)[:500],
                      checked=thorough)

    @staticmethod
    def _add_queues(space: AddressSpace, names: list[str] | None,
                    broker: endpoints.BrokerEndpoint) -> Report | None:
        """The short path (`BrokerReconciler.add`) for the new queues `names`: the report when
        every one is verified on the broker, None (the full apply follows, and repairs what
        this did halfway) when it does not apply, failed or verified less."""
        if not names:
            return None
        new = [a for a in statements.addresses_named(space, names) if a.type in NEW_QUEUE_TYPES]
        if len(new) != len(names):
            return None  # one is pending or gone since: the full apply knows what to do
        queues = [broker_queue(a) for a in new]
        if any(rabbitmq.policy_definition(q) or rabbitmq.dead_letter_routes(q) for q in queues):
            return None  # a policy names its queues together (every queue of a standard space)
        # Every user's permissions as the full apply grants them (the same `desired_objects`),
        # which only the names of the space's queues and topics decide.
        # Tuples, not model instances: a brokered space holds hundreds of queues.
        stored = Address.objects.filter(space=space, scheduled=True,
                                        type__in=STORED_TYPES).values_list("type", "address",
                                                                           "topic")
        all_queues, all_topics = [], []
        for kind, address, topic in stored:
            if kind == "topic":
                all_topics.append(BrokerTopic(name=address))
            else:
                all_queues.append(BrokerQueue(name=broker_object_name(kind, address, topic),
                                              kind=kind, topic=topic or None))
        replicated = broker.cluster
        wanted = rabbitmq.desired_objects(VhostState(
            vhost=space.vhost, throttled=tenant_throttled(space), users=desired_users(space),
            queues=all_queues, topics=all_topics, replicated=replicated))
        vhost = VhostState(vhost=space.vhost, queues=queues,
                           queue_exchanges=space.type != "standard", replicated=replicated)
        api = management_api(broker)
        try:
            result = rabbitmq.BrokerReconciler(api).add(
                vhost, wanted.permissions, wanted.topic_permissions)
        except rabbitmq.BrokerError:
            return None  # a read failed: the full apply tells a busy broker from a refusal
        finally:
            changed_vhosts.mark(api.base_url, space.vhost)  # new queues, made or halfway
        if result is None or not result.ok or result.transient or any(
                not result.is_active(a.broker_object_name) for a in new):
            return None
        return Report(address_errors={}, space_error="", checked=False)

    @staticmethod
    def _purge(api: rabbitmq.RabbitMQApi, space: AddressSpace, by_name: dict) -> dict:
        """Carries out the purges asked for since the last reconcile of the addresses
        `by_name` (those on the broker of `api`); returns {name: error} for those the broker
        refused for good. A transient error retries the whole reconcile (the purge is not
        recorded as done)."""
        refused = {}
        for name in purges_to_carry_out(space):
            address = by_name.get(name)
            if address is None:
                continue  # deleted (or not scheduled, so never on the broker) since
            try:
                api.purge_queue(space.vhost, address.broker_object_name)
            except rabbitmq.BrokerError as exc:
                if exc.transient:
                    raise TransientError(f"purge of {address.address}: {exc}") from exc
                refused[name] = {"message": f"The broker refused the purge: {exc}",
                                 "permanent": False}
                continue
            logger.info("storage.purged", extra={"space": str(space.uid), "vhost": space.vhost,
                                                 "address": address.address})
        return refused

    def teardown(self, space: AddressSpace) -> None:
        """Deletes the space's vhost (or MaaS's objects in it) and users; any failure is
        retried, so no vhost is left behind with its queues."""
        if space.type == "brokered":
            certificates.withdraw(space)
        for broker in endpoints.of(space).brokers:
            try:
                result = rabbitmq.BrokerReconciler(management_api(broker)).teardown(space.vhost)
            except rabbitmq.BrokerError as exc:
                raise TransientError(str(exc)) from exc
            if not result.ok:
                problems = (result.vhost_errors + list(result.errors.values())
                            + [f"user {u}: {m}" for u, m in result.user_errors.items()])
                raise TransientError("; ".join(problems)[:400])
        credentials.forget(credentials.router_broker_name(space.vhost))


def nothing_to_store(events: list | None, state: AgentState | None) -> Report | None:
    """The last report again, without asking the broker, when every event this agent has not
    applied (`events`, from `pending_events`) creates an anycast or multicast address (nothing
    of the broker changes; the router agent runs meanwhile); None otherwise. A resync has no
    new event: it checks the broker."""
    if not only_creates(events, ROUTER_ONLY_TYPES):
        return None
    if state is None or state.applied_at is None or state.invalidated:
        return None
    return Report(address_errors=state.address_errors, space_error=state.space_error,
                  checked=False)


def new_queues_only(events: list | None, state: AgentState | None) -> list[str] | None:
    """Names of the queue and deadletter addresses the pending `events` create, when creating
    addresses is all they do (anycast and multicast ones need nothing here) and the last
    reconcile left the vhost as desired: no address or space error, no invalidation (a
    restarted broker), and they are no more than NEW_QUEUES_BY_NAME. None otherwise: a
    resync, any other event, a topic or a subscription (their objects are shared: policies,
    topic bindings), or a list of many queues take the full apply."""
    if not events or state is None or state.applied_at is None or state.invalidated \
            or state.address_errors or state.space_error:
        return None
    names = []
    for event_type, payload in events:
        if event_type != "address.created":
            return None
        if payload.get("type") in ROUTER_ONLY_TYPES:
            continue
        if payload.get("type") not in NEW_QUEUE_TYPES:
            return None
        names.append(payload["name"])
    return names if 0 < len(names) <= NEW_QUEUES_BY_NAME else None


def purges_to_carry_out(space: AddressSpace) -> list[str]:
    """Names of the addresses whose purge (`address.purged`) this agent has not carried out:
    the events after the sequence it last applied. That sequence is recorded in the same
    transaction that follows this reconcile, so a duplicate delivery or a resync after it
    never purges again."""
    state = agent_state(space.uid, "storage")
    applied = state.applied_sequence if state else 0
    events = ConfigEvent.objects.filter(stream_id=space.uid, type="address.purged",
                                        sequence__gt=applied, sequence__lte=space.last_sequence)
    return list(dict.fromkeys(e.payload["name"] for e in events.order_by("sequence")))
