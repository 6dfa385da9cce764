"""The RabbitMQ reconciler: `BrokerReconciler` makes one vhost look like a `desired.VhostState`.

Level-triggered and idempotent: every `apply` observes what the vhost has (a few reads at
once, each of the vhost or of its users, never of the whole broker), converges it on the
desired objects (`rabbitmq_objects`) by creating, changing or deleting only what MaaS owns,
then verifies each address and user; `ApplyResult` says what it did and what is in place.
Creates of exchanges, policies, queues and bindings go in one definitions import when there
are several (`rabbitmq_batch`).

One module of 800-odd lines: observe, converge and verify work on the same observed state
(`_Actual`) and the same result; the management API client, the desired objects and the batch
of creates are modules of their own.
"""
from __future__ import annotations

import json
import logging
import time
from concurrent.futures import wait
from dataclasses import dataclass, field, replace
from functools import partial

from core.threads import process_pool
from workers.agents.storage.desired import BrokerUser, VhostState
from workers.agents.storage.rabbitmq_batch import BATCH_MIN, CreateBatch
from workers.agents.storage.rabbitmq_objects import (
    DLX_EXCHANGE,
    FALLBACK_TOPIC_TYPE,
    INCARNATION_ARG,
    INCARNATION_TAG_PREFIX,
    MQTT_EXCHANGE,
    OWNER_ARG,
    OWNER_TAG,
    POLICY_PREFIX,
    TOPIC_TYPE,
    TOPIC_TYPES,
    Binding,
    DesiredObjects,
    desired_objects,
)
from workers.clients.rabbitmq_api import HASHING_ALGORITHM, BrokerError, RabbitMQApi
from workers.naming import USER_SEPARATOR

log = logging.getLogger(__name__)

VHOST_DESCRIPTION = "Managed by MaaS (storage controller)"
_USER = "user:"  # `_observe`'s key of a desired user's GET among its reads
TOPIC_TYPE_TTL = 300.0  # seconds a broker's answer to "has it x-maas-topic?" is reused
_topic_types: dict[str, tuple[float, str]] = {}  # broker API URL -> (monotonic expiry, type)
# Seconds a broker's users without permissions are reused by the drift checks of its spaces:
# RabbitMQ works that list out from all its users (15 ms of a node's CPU at 250 vhosts), and a
# round of drift checks read it once per space, the same list each time.
UNPERMITTED_TTL = 60.0
_unpermitted: dict[str, tuple[float, list]] = {}  # broker API URL -> (monotonic read at, rows)


def topic_type(api: RabbitMQApi) -> str:
    """The exchange type for topic addresses on this broker: MaaS's where its plugin is
    enabled (docs/storage.md), else RabbitMQ's topic. Asked once per TOPIC_TYPE_TTL."""
    now = time.monotonic()
    cached = _topic_types.get(api.base_url)
    if cached and cached[0] > now:
        return cached[1]
    try:
        types = api.exchange_types()
    except BrokerError:
        if cached is None:
            raise
        return cached[1]  # the broker is busy: its plugins did not change meanwhile
    kind = TOPIC_TYPE if TOPIC_TYPE in types else FALLBACK_TOPIC_TYPE
    if kind == FALLBACK_TOPIC_TYPE:
        log.warning("storage.rabbitmq.no_maas_topic_type", extra={"broker": api.base_url})
    _topic_types[api.base_url] = (now + TOPIC_TYPE_TTL, kind)
    return kind


def users_without_permissions(api: RabbitMQApi, fresh: bool = False) -> list[dict]:
    """The broker's users that hold no permissions, read at most once per UNPERMITTED_TTL
    by this process unless `fresh`. A row up to that old is harmless: the apply only deletes
    the vhost's own stale users among them (a DELETE of one gone meanwhile is a no-op), and
    one that turned stale since is found by the next drift check."""
    now = time.monotonic()
    cached = _unpermitted.get(api.base_url)
    if cached and now - cached[0] < UNPERMITTED_TTL and not fresh:
        return cached[1]
    rows = api.list_users_without_permissions()
    _unpermitted[api.base_url] = (now, rows)
    return rows


def forget_unpermitted() -> None:
    """Drops every cached list of users without permissions (tests)."""
    _unpermitted.clear()


def _objects(definitions: dict) -> dict:
    """`_Actual`'s queues, exchanges, bindings (not of the default exchange) and policies
    of the vhost, from its definitions (`RabbitMQApi.vhost_definitions`)."""
    return {
        "queues": {q["name"]: q for q in definitions.get("queues") or []},
        "exchanges": {x["name"]: x for x in definitions.get("exchanges") or []},
        "bindings": [b for b in definitions.get("bindings") or [] if b["source"]],
        "policies": {p["name"]: p for p in definitions.get("policies") or []},
    }


# --- what the vhost has ----------------------------------------------------------------


@dataclass
class _Actual:
    vhost: dict | None
    queues: dict[str, dict]
    exchanges: dict[str, dict]
    bindings: list[dict]
    policies: dict[str, dict]
    users: dict[str, dict]  # the desired users and the vhost's others (`_users`)
    permissions: dict[str, dict]
    limits: dict
    topic_permissions: dict[str, dict] = field(default_factory=dict)  # user -> amq.topic's

    @property
    def vhost_owned(self) -> bool:
        return self.vhost is not None and OWNER_TAG in _tags(self.vhost)


def require_running(vhost: str, info: dict | None) -> None:
    """Raises a transient BrokerError unless the vhost runs on every node of the broker.

    RabbitMQ records a vhost, then starts it, one vhost at a time: at a few hundred vhosts a
    start waited minutes, past the PUT's timeout. Meanwhile a definitions import into it
    answers success and declares no queue, and the router's links to it are refused, again
    every second: applying then reported the space's queues as errors and let its router agent
    go on (1,000 spaces: 70 broker connections a second, docs/scale.md). So the apply stops
    and is retried with backoff, and the router agent, which runs after it, waits with it."""
    states = (info or {}).get("cluster_state") or {}
    down = sorted(f"{node}: {state}" for node, state in states.items() if state != "running")
    if down:
        raise BrokerError(f"vhost {vhost} is not running yet ({', '.join(down)})",
                          transient=True)


def _tags(obj: dict) -> list[str]:
    tags = obj.get("tags") or []
    if isinstance(tags, str):
        tags = [t for t in tags.split(",") if t]
    return tags


def _owned(obj: dict) -> bool:
    return (obj.get("arguments") or {}).get(OWNER_ARG) is True


def _binding_key(row: dict) -> Binding:
    return Binding.of(
        row["source"], row["destination"], row["routing_key"], row.get("arguments") or {},
        row["destination_type"],
    )


# --- results ---------------------------------------------------------------------------


@dataclass
class ApplyResult:
    """What one apply did, and which addresses and users are verified as desired."""

    vhost: str
    created: list[str] = field(default_factory=list)  # "queue:orders", "user:bob@space", ...
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)  # "connections:bob@space" (throttled)
    errors: dict[str, str] = field(default_factory=dict)  # address -> message
    user_errors: dict[str, str] = field(default_factory=dict)  # broker username -> message
    vhost_errors: list[str] = field(default_factory=list)  # e.g. the connection limit
    verified: set[str] = field(default_factory=set)  # addresses confirmed on the broker
    verified_users: set[str] = field(default_factory=set)
    transient: bool = False  # some error was transient: retry soon

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)

    @property
    def ok(self) -> bool:
        return not (self.errors or self.user_errors or self.vhost_errors)

    def is_active(self, address: str) -> bool:
        return address in self.verified and address not in self.errors


# --- the reconciler --------------------------------------------------------------------


class BrokerReconciler:
    """Level-triggered and idempotent: each apply converges the vhost on the desired state."""

    def __init__(self, api: RabbitMQApi, topic_kind: str | None = None) -> None:
        self.api = api
        self.topic_kind = topic_kind  # the broker's topic exchange type, if the caller knows
        self._batch: CreateBatch | None = None  # while converging: creates held back

    # public

    def apply(self, state: VhostState, verify: bool = True,
              thorough: bool = True) -> ApplyResult:
        """Converge the vhost; raises BrokerError only when the vhost cannot be read.
        `thorough` also looks for stale users of the vhost that hold no permissions (a read
        of the broker's users: a resync's job, not every change's; see `_users`)."""
        result = ApplyResult(vhost=state.vhost)
        # The vhost first, alone: one that RabbitMQ has not started yet costs this one GET per
        # attempt, not a dozen listings (at a few hundred vhosts waiting to start, the retries'
        # listings kept the broker's CPU from the starts themselves; docs/scale.md).
        info = self.api.get_vhost(state.vhost)
        if info is None:
            tags = (OWNER_TAG, f"{INCARNATION_TAG_PREFIX}{_now_ms()}")
            self._do(result, "created", "vhost:" + state.vhost, None, self.api.put_vhost,
                     state.vhost, VHOST_DESCRIPTION, tags)
            if result.vhost_errors:
                return result
            info = self.api.get_vhost(state.vhost)
            if info is None:
                raise BrokerError(f"vhost {state.vhost} not there after its creation",
                                  transient=True)
        require_running(state.vhost, info)
        desired = desired_objects(state, self.topic_kind or topic_type(self.api))
        result.errors.update(desired.errors)
        result.user_errors.update(desired.user_errors)
        actual = self._observe(state.vhost, desired, thorough, info=info)
        self._grant_self(state.vhost, actual, result)
        self._converge(state, desired, actual, result)
        if verify:
            # What we listed is the proof for what we did not touch; list again what changed.
            after = self._reobserve(state.vhost, desired, actual, result, thorough)
            self._verify(state, desired, after, result)
        log.info("storage.rabbitmq.applied", extra={
            "vhost": state.vhost, "n_created": len(result.created),
            "n_updated": len(result.updated), "n_deleted": len(result.deleted),
            "n_errors": len(result.errors) + len(result.user_errors),
            "n_verified": len(result.verified),
        })
        return result

    def add(self, state: VhostState, permissions: dict[str, dict],
            topic_permissions: dict[str, dict]) -> ApplyResult | None:
        """The short path for new queues in a vhost the last apply left as desired: makes the
        objects of `state.queues` (each queue, its exchange and binding) after reading only
        those objects, by name, and verifies them by name again; nothing else of the vhost is
        listed (a full apply lists every queue, exchange and binding twice: most of its cost
        in a vhost of 100 queues). None, having changed nothing, when the queues need a
        policy, a dead-letter route, a topic or a user change (a policy names its queues
        together, so it needs them all): the caller applies in full. The caller falls back
        to the full apply too on any error or unverified object in the result.
        `state` holds only the new queues, no topic and no user. `permissions` and
        `topic_permissions` are every user's of the space as the full apply would make them,
        with the new queues: read first, any difference (a queue a send right matches for
        the first time, a throttle, a user changed by hand) is None too."""
        if state.topics or state.users:
            return None
        desired = desired_objects(state)  # no topic: the topic exchange type is not used
        if desired.policies or desired.errors:
            return None
        v = state.vhost
        result = ApplyResult(vhost=v)
        actual = self._observe_named(v, desired, users=True)
        if any(_differs(actual.permissions.get(u), p) for u, p in permissions.items()) or any(
                _differs(actual.topic_permissions.get(u), p)
                for u, p in topic_permissions.items()):
            return None
        self._converge_objects(v, desired, actual, result, each=True)
        if result.ok and not result.transient:
            self._verify(state, desired, self._observe_named(v, desired), result)
        log.info("storage.rabbitmq.added", extra={
            "vhost": v, "n_created": len(result.created), "n_verified": len(result.verified),
            "n_errors": len(result.errors)})
        return result

    def verify(self, state: VhostState) -> ApplyResult:
        """Re-query the vhost and report which desired addresses and users are in place."""
        result = ApplyResult(vhost=state.vhost)
        desired = desired_objects(state, topic_type(self.api))
        result.errors.update(desired.errors)
        result.user_errors.update(desired.user_errors)
        self._verify(state, desired, self._observe(state.vhost, desired), result)
        return result

    def teardown(self, vhost: str) -> ApplyResult:
        """Delete what MaaS owns for the vhost: its users, and the vhost if MaaS made it
        (otherwise only MaaS's objects inside it)."""
        desired = DesiredObjects()
        # The users without permissions as they are now: a vhost deleted by hand left its
        # users so, and this is their last chance to be found.
        actual = self._observe(vhost, desired, fresh=True)
        result = ApplyResult(vhost=vhost)
        if actual.vhost_owned:
            # Users are global: deleting the vhost would only drop their permissions.
            for user in sorted(self._owned_users(vhost, actual)):
                self._do(result, "deleted", "user:" + user, None, self.api.delete_user, user)
            self._do(result, "deleted", "vhost:" + vhost, None, self.api.delete_vhost, vhost)
        else:
            # Converging on nothing deletes exactly MaaS's objects and users.
            self._converge(VhostState(vhost=vhost), desired, actual, result)
        log.info("storage.rabbitmq.torn_down", extra={
            "vhost": vhost, "n_deleted": len(result.deleted), "vhost_owned": actual.vhost_owned,
        })
        return result

    # observing

    def _observe(self, vhost: str, desired: DesiredObjects, thorough: bool = True,
                 info: dict | None = None, fresh: bool = False) -> _Actual:
        """A handful of reads of the vhost and one GET per desired user, at the same time
        (the broker answers them in parallel: the time of the slowest, not of all); raises
        BrokerError if the broker cannot be read. Nothing that grows with the other spaces of
        the broker is read, except the users without permissions when `thorough` (`_users`;
        a list this process read within UNPERMITTED_TTL, unless `fresh`).
        `info`: the vhost, when the caller has just read it."""
        info = info if info is not None else self.api.get_vhost(vhost)
        calls = {_USER + name: partial(self.api.get_user, name) for name in desired.users}
        calls["unpermitted"] = (partial(users_without_permissions, self.api, fresh)
                                if thorough else list)
        if info is not None:
            calls.update({
                # Queues, exchanges, bindings and policies in one read of the definitions.
                "objects": lambda: _objects(self.api.vhost_definitions(vhost)),
                "permissions": lambda: {p["user"]: p for p in self.api.list_permissions(vhost)},
                "limits": lambda: self.api.get_vhost_limits(vhost),
                "topic_permissions": lambda: {
                    p["user"]: p for p in self.api.list_topic_permissions(vhost)
                    if p.get("exchange") == MQTT_EXCHANGE
                },
            })
        read = _concurrently(calls)
        named = {name: read.pop(_USER + name) for name in desired.users}
        permissions = read.pop("permissions", {})
        users = self._users(vhost, named, permissions, read.pop("unpermitted"))
        if info is None:
            return _Actual(None, {}, {}, [], {}, users, {}, {})
        return _Actual(vhost=info, users=users, permissions=permissions, **read.pop("objects"),
                       **read)

    def _observe_named(self, vhost: str, desired: DesiredObjects, users: bool = False) -> _Actual:
        """The desired exchanges, queues and bindings alone, each read by name, at the same
        time (`add`), and with `users` the vhost's permissions; the vhost is taken to exist
        (a write into a missing one fails)."""
        calls = {("queue", n): partial(self.api.get_queue, vhost, n) for n in desired.queues}
        if users:
            calls[("permissions",)] = partial(self.api.list_permissions, vhost)
            calls[("topic_permissions",)] = partial(self.api.list_topic_permissions, vhost)
        calls.update({("exchange", n): partial(self.api.get_exchange, vhost, n)
                      for n in desired.exchanges})
        pairs = {(b.source, b.destination, b.destination_type) for b in desired.bindings}
        calls.update({("bindings", *pair): partial(self.api.list_bindings_between, vhost, *pair)
                      for pair in sorted(pairs)})
        read = _concurrently(calls)
        return _Actual(
            vhost={"name": vhost},
            queues={k[1]: q for k, q in read.items() if k[0] == "queue" and q is not None},
            exchanges={k[1]: x for k, x in read.items() if k[0] == "exchange" and x is not None},
            bindings=[b for k, rows in read.items() if k[0] == "bindings" for b in rows],
            policies={}, users={}, limits={},
            permissions={p["user"]: p for p in read.get(("permissions",), [])},
            topic_permissions={p["user"]: p for p in read.get(("topic_permissions",), [])
                               if p.get("exchange") == MQTT_EXCHANGE})

    def _reobserve(self, vhost: str, desired: DesiredObjects, actual: _Actual,
                   result: ApplyResult, thorough: bool = True) -> _Actual:
        """`actual` with the kinds of object this apply created, changed or deleted listed
        again (one GET each, at the same time: the broker answers them in parallel): a steady
        apply lists nothing more, a new plain queue 1 GET. Only desired objects are verified,
        so deletions need no second look; a desired binding missing before the apply was
        created by it (and so is listed again)."""
        touched = {label.split(":", 1)[0] for label in
                   result.created + result.updated + result.deleted}
        if not touched:
            return actual
        if "vhost" in touched:
            return self._observe(vhost, desired, thorough)
        calls = {}
        if len(touched & {"queue", "exchange", "binding", "policy"}) > 1:
            # e.g. a new queue, its binding and policy: one read instead of three lists
            calls["objects"] = lambda: _objects(self.api.vhost_definitions(vhost))
        elif "queue" in touched:
            calls["queues"] = lambda: {q["name"]: q for q in self.api.list_queues(vhost)}
        elif "exchange" in touched:
            calls["exchanges"] = lambda: {x["name"]: x for x in self.api.list_exchanges(vhost)}
        elif "binding" in touched:  # a new queue's bindings are created (touched) after it
            calls["bindings"] = lambda: [b for b in self.api.list_bindings(vhost) if b["source"]]
        elif "policy" in touched:
            calls["policies"] = lambda: {p["name"]: p for p in self.api.list_policies(vhost)}
        written = [label.split(":", 1)[1] for label in result.created + result.updated
                   if label.startswith("user:")]  # only the users this apply wrote: a GET each
        calls.update((_USER + name, partial(self.api.get_user, name)) for name in written)
        if touched & {"user", "permissions"}:  # deleting a user drops its permissions
            calls["permissions"] = lambda: {
                p["user"]: p for p in self.api.list_permissions(vhost)}
        if touched & {"user", "topic-permissions"}:
            calls["topic_permissions"] = lambda: {
                p["user"]: p for p in self.api.list_topic_permissions(vhost)
                if p.get("exchange") == MQTT_EXCHANGE}
        if "limit" in touched:
            calls["limits"] = lambda: self.api.get_vhost_limits(vhost)
        read = _concurrently(calls)  # the calls do not nest: the pool is small
        read.update(read.pop("objects", {}))
        fresh = {name: read.pop(_USER + name) for name in written}
        if written:
            read["users"] = {**actual.users, **{n: u for n, u in fresh.items() if u is not None}}
        return replace(actual, **read)

    def _users(self, vhost: str, named: dict[str, dict | None], permissions: dict[str, dict],
               unpermitted: list[dict]) -> dict[str, dict]:
        """The users MaaS must know of for the vhost, without listing the broker's users
        (they are global: that list grows with every space): the desired ones (`named`, one
        GET each), those named for the vhost that hold permissions on it (one GET each of
        those not desired: stale ones, or someone else's), and those named for it among the
        users that hold no permissions anywhere (on a healthy broker: few or none; RabbitMQ
        works that list out from all its users: 400 ms at 600 vhosts, so only a thorough
        apply, a resync, reads it, and reuses it for UNPERMITTED_TTL). That last read finds a
        stale user of the vhost without permissions: created, then the agent stopped
        before granting it and the user was deleted before the next apply; a permission PUT
        that failed; a teardown whose user delete failed but whose vhost delete did not; a
        vhost deleted by hand. MaaS grants a user on its own vhost only, so no user of the
        vhost is missed unless someone granted it on another vhost by hand."""
        suffix = USER_SEPARATOR + vhost
        users = {name: u for name, u in named.items() if u is not None}
        users.update((u["name"], u) for u in unpermitted if u["name"].endswith(suffix))
        users.update(self._get_users(
            [name for name in permissions if name.endswith(suffix) and name not in users]
        ))
        return users

    def _get_users(self, names: list[str]) -> dict[str, dict]:
        """The named users that exist, one GET each, at the same time."""
        read = _concurrently({name: partial(self.api.get_user, name) for name in names})
        return {name: u for name, u in read.items() if u is not None}

    @staticmethod
    def _owned_users(vhost: str, actual: _Actual) -> list[str]:
        suffix = USER_SEPARATOR + vhost
        return [
            name for name, u in actual.users.items()
            if OWNER_TAG in _tags(u) and name.endswith(suffix)
        ]

    # converging

    def _grant_self(self, vhost: str, actual: _Actual, result: ApplyResult) -> None:
        """RabbitMQ grants a vhost's creator its permissions within the PUT of the vhost; one
        that timed out on a busy broker (seen at ~400 vhosts) can leave MaaS's own vhost
        without them, and every later write there answers 401 for good. Grant them again."""
        if actual.vhost_owned and self.api.user not in actual.permissions:
            if self._do(result, "created", "permissions:" + self.api.user, None,
                        self.api.put_permissions, vhost, self.api.user, ".*", ".*", ".*"):
                actual.permissions[self.api.user] = {"user": self.api.user}

    def _converge(
        self, state: VhostState, desired: DesiredObjects, actual: _Actual, result: ApplyResult
    ) -> None:
        """Create and update first (policies before queues, so a queue never runs without
        its limits), then delete stale objects (bindings before what they connect)."""
        v = state.vhost
        self._converge_objects(v, desired, actual, result)
        self._converge_users(v, desired, actual, result)
        self._delete_stale(v, desired, actual, result)
        self._converge_limits(state, actual, result)

    def _converge_objects(self, v, desired: DesiredObjects, actual: _Actual, result,
                          each: bool = False) -> None:
        """Exchanges, policies, queues and bindings: the creates held back and made at the
        end (`_create`), in one import when there are several; with `each`, one call each
        (`_create_each`)."""
        self._batch = batch = CreateBatch()
        try:
            self._converge_exchanges(v, desired, actual, result)
            self._converge_policies(v, desired, actual, result)
            self._converge_queues(v, desired, actual, result)
            self._converge_bindings(v, desired, actual, result)
        finally:
            self._batch = None
        if each:
            self._create_each(batch, result)
        else:
            self._create(v, batch, result)

    def _converge_exchanges(self, v, desired: DesiredObjects, actual: _Actual, result) -> None:
        for name, spec in desired.exchanges.items():
            have = actual.exchanges.get(name)
            address = desired.owner.get("exchange:" + name)
            if have is not None:
                if not _owned(have):
                    self._error(result, address, f"exchange {name!r} exists, not owned by MaaS")
                elif _exchange_differs(have, spec):
                    self._remake_exchange(v, name, spec, address, actual, result)
                continue
            args = _exchange_args(spec["type"])
            self._do(result, "created", "exchange:" + name, address, self.api.put_exchange,
                     v, name, spec["type"], args, spec["durable"], spec["internal"])

    def _remake_exchange(self, v, name: str, spec: dict, address: str | None, actual: _Actual,
                         result: ApplyResult) -> None:
        """An exchange of ours with another type or durability: a topic made before (or after)
        the broker had MaaS's topic type, an address deleted and made again as another type, or
        a durable exchange of an earlier release (MaaS's are transient now: rabbitmq_objects).
        Made again (RabbitMQ changes neither) and every binding from or to it put back, its
        receivers' temporary queues included; stale ones then go as usual. A publish in the
        few milliseconds between gets `not-found`; a topic's counters start again under a new
        creation stamp, as after any re-creation."""
        bound = [b for b in actual.bindings if b["source"] == name or (
            b["destination"] == name and b["destination_type"] == "exchange")]
        self._do(result, "deleted", "exchange:" + name, address, self.api.delete_exchange,
                 v, name)
        args = _exchange_args(spec["type"])
        self._do(result, "updated", "exchange:" + name, address, self.api.put_exchange,
                 v, name, spec["type"], args, spec["durable"], spec["internal"])
        for b in bound:
            call = (self.api.create_binding, v, b["source"], b["destination"], b["routing_key"],
                    b.get("arguments") or {}, b["destination_type"])
            if _owned(b):
                self._do(result, "created", _binding_label(_binding_key(b)), address, *call)
                continue
            try:  # a receiver's queue: it may have gone meanwhile; nothing of ours to fix
                call[0](*call[1:])
            except BrokerError as exc:
                log.warning("storage.rabbitmq.rebind_failed", extra={
                    "vhost": v, "object": _binding_label(_binding_key(b)), "error": exc.message})
        actual.exchanges[name] = {**actual.exchanges[name], "type": spec["type"],
                                  "durable": spec["durable"], "arguments": args}

    def _converge_policies(self, v, desired: DesiredObjects, actual: _Actual, result) -> None:
        for name, spec in desired.policies.items():
            have = actual.policies.get(name)
            if have is not None and all(have.get(k) == spec[k] for k in spec):
                continue
            self._do(result, "updated" if have else "created", "policy:" + name,
                     desired.owner.get("policy:" + name), self.api.put_policy, v, name,
                     spec["pattern"], spec["definition"], spec["priority"], spec["apply-to"])

    def _converge_queues(self, v, desired: DesiredObjects, actual: _Actual, result) -> None:
        for name, args in desired.queues.items():
            have = actual.queues.get(name)
            if have is None:
                self._do(result, "created", "queue:" + name, name, self.api.put_queue,
                         v, name, {**args, INCARNATION_ARG: _now_ms()})
                continue
            problem = _queue_problem(have, args)
            if problem:
                self._error(result, name, problem)

    def _converge_bindings(self, v, desired: DesiredObjects, actual: _Actual, result) -> None:
        have = {_binding_key(b) for b in actual.bindings}
        for binding, address in desired.bindings.items():
            if binding in have:
                continue
            if binding.destination_type == "queue":
                if binding.destination not in actual.queues and binding.destination in (
                    result.errors
                ):
                    continue  # its queue could not be created; that error says why
            elif not ((binding.source == MQTT_EXCHANGE  # built in: RabbitMQ's MQTT publishes
                       or _exchange_ours(binding.source, actual, result))
                      and _exchange_ours(binding.destination, actual, result)):
                # An exchange MaaS does not own gets no binding of ours (nothing would ever
                # delete it), nor one that could not be created; its error says why.
                continue
            self._do(result, "created", _binding_label(binding), address,
                     self.api.create_binding, v, binding.source, binding.destination,
                     binding.routing_key, json.loads(binding.arguments),
                     binding.destination_type)

    def _converge_users(self, v, desired: DesiredObjects, actual: _Actual, result) -> None:
        for name, user in desired.users.items():
            have = actual.users.get(name)
            if have is not None and OWNER_TAG not in _tags(have):
                result.user_errors[name] = "a user with this name exists, not owned by MaaS"
                continue
            if have is None or _user_differs(have, user):
                ok = self._do(result, "updated" if have else "created", "user:" + name, None,
                              self.api.put_user, name, user.password_hash, (OWNER_TAG,),
                              user=name)
                if not ok:
                    continue
            self._converge_user_limits(name, user, (have or {}).get("limits") or {}, result)
            perms = desired.permissions[name]
            current = actual.permissions.get(name)
            if current is None or any(current.get(k) != perms[k] for k in perms):
                ok = self._do(result, "updated" if current else "created",
                              "permissions:" + name, None, self.api.put_permissions, v, name,
                              perms["configure"], perms["write"], perms["read"], user=name)
                if (ok and current is not None and name in desired.throttled
                        and current.get("write") != perms["write"]):
                    self._cut_off(v, name, current, result)
            topic = desired.topic_permissions[name]
            current = actual.topic_permissions.get(name)
            if current is None or any(current.get(k) != topic[k] for k in topic):
                self._do(result, "updated" if current else "created",
                         "topic-permissions:" + name, None, self.api.put_topic_permissions, v,
                         name, topic["exchange"], topic["write"], topic["read"], user=name)

    def _converge_user_limits(self, name: str, user: BrokerUser, have: dict,
                              result: ApplyResult) -> None:
        """RabbitMQ's user limits (`limits` of the user as read), over all its connections."""
        for limit, value in (("max-connections", user.max_connections),
                             ("max-channels", user.max_channels)):
            if value is not None and have.get(limit) != value:
                self._do(result, "updated", f"user-limit:{name}:{limit}", None,
                         self.api.put_user_limit, name, limit, value, user=name)
            elif value is None and limit in have:
                self._do(result, "deleted", f"user-limit:{name}:{limit}", None,
                         self.api.delete_user_limit, name, limit, user=name)

    def _cut_off(self, v, name: str, previous: dict, result: ApplyResult) -> None:
        """Closes the throttled user's connections: RabbitMQ checks write once per channel and
        caches the answer, so open senders would go on sending; clients reconnect under the new
        permission. Only when the permission changed, so a steady apply kicks nobody; should the
        close fail, the previous permission goes back, so that the next apply does both again."""
        if self._do(result, "closed", "connections:" + name, None,
                    self.api.close_user_connections, name, user=name):
            return
        self._do(result, "updated", "permissions:" + name, None, self.api.put_permissions, v,
                 name, previous.get("configure", ""), previous.get("write", ""),
                 previous.get("read", ""), user=name)

    def _delete_binding(self, v: str, row: dict) -> None:
        """Deletes the binding `row`. A binding read from the definitions has no
        `properties_key` (RabbitMQ's name for it, with a hash of its arguments): the bindings
        between its two ends are read for it first (rare: only a stale binding is deleted)."""
        key = row.get("properties_key")
        if key is None:
            key = next((b["properties_key"] for b in self.api.list_bindings_between(
                v, row["source"], row["destination"], row["destination_type"])
                if b["routing_key"] == row["routing_key"]
                and (b.get("arguments") or {}) == (row.get("arguments") or {})), None)
            if key is None:
                return  # gone meanwhile
        self.api.delete_binding(v, row["source"], row["destination"], key,
                                row["destination_type"])

    def _delete_stale(self, v, desired: DesiredObjects, actual: _Actual, result) -> None:
        owned_sources = {n for n, x in actual.exchanges.items() if _owned(x)}
        for row in actual.bindings:
            key = _binding_key(row)
            ours = _owned(row) or (row["source"] == DLX_EXCHANGE
                                   and row["destination_type"] == "queue")
            if row["destination_type"] not in ("queue", "exchange") or not ours:
                continue
            if row["source"] in owned_sources and key not in desired.bindings:
                self._do(result, "deleted", _binding_label(key), None, self._delete_binding,
                         v, row)
        for name, q in actual.queues.items():
            if _owned(q) and name not in desired.queues:
                self._do(result, "deleted", "queue:" + name, None, self.api.delete_queue, v, name)
        for name, x in actual.exchanges.items():
            if _owned(x) and name not in desired.exchanges:
                self._do(result, "deleted", "exchange:" + name, None,
                         self.api.delete_exchange, v, name)
        for name in actual.policies:
            if name.startswith(POLICY_PREFIX) and name not in desired.policies:
                self._do(result, "deleted", "policy:" + name, None, self.api.delete_policy,
                         v, name)
        for name in self._owned_users(v, actual):
            if name not in desired.users:
                self._do(result, "deleted", "user:" + name, None, self.api.delete_user, name)

    def _create(self, v: str, batch: CreateBatch, result: ApplyResult) -> None:
        """Makes the creates held back while converging: one definitions import (RabbitMQ
        imports policies before queues, exchanges before bindings), or one call each when
        they are few. An import refused as invalid is made again one call each, so that each
        refusal is told against its own address; one that failed for a transient reason (a
        busy broker) marks them all failed, and the apply is retried."""
        for item in batch.items:  # `_do` counted them as created while converging
            result.created.remove(item.label)
        if len(batch.items) >= BATCH_MIN:
            try:
                self.api.import_definitions(v, batch.definitions())
            except BrokerError as exc:
                log.warning("storage.rabbitmq.import_failed", extra={
                    "vhost": v, "n_objects": len(batch.items), "error": exc.message,
                    "transient": exc.transient})
                if exc.transient:
                    result.transient = True
                    for item in batch.items:
                        self._error(result, item.address, exc.message)
                    return
            else:
                result.created.extend(item.label for item in batch.items)
                log.info("storage.rabbitmq.imported",
                         extra={"vhost": v, "n_objects": len(batch.items)})
                return
        for item in batch.items:
            self._do(result, "created", item.label, item.address, *item.call)

    def _create_each(self, batch: CreateBatch, result: ApplyResult) -> None:
        """Makes the creates held back one call each, at the same time: the exchanges, queues
        and policies, then the bindings between them. The short path's way (`add`): a
        definitions import costs the broker more the more vhosts it holds, a call by name does
        not (beside 1,000 vhosts of 100 queues a new queue took 92 ms by name, 1,228 ms through
        the full apply's listings and import: tests/bench/bench_storage_changes.py; docs/scale.md,
        "Brokered spaces at fleet scale")."""
        for item in batch.items:  # `_do` counted them as created while converging
            result.created.remove(item.label)
        for wave in ([i for i in batch.items if not _is_binding(i)],
                     [i for i in batch.items if _is_binding(i)]):
            _concurrently({n: partial(self._do, result, "created", item.label, item.address,
                                      *item.call) for n, item in enumerate(wave)})

    def _converge_limits(self, state: VhostState, actual: _Actual, result) -> None:
        current = actual.limits.get("max-connections")
        if state.max_connections is not None and current != state.max_connections:
            ok = self._do(result, "updated", "limit:max-connections", None,
                          self.api.put_vhost_limit, state.vhost, "max-connections",
                          state.max_connections)
            if not ok:
                return
        elif state.max_connections is None and current is not None and actual.vhost_owned:
            self._do(result, "deleted", "limit:max-connections", None,
                     self.api.delete_vhost_limit, state.vhost, "max-connections")

    # verifying

    def _verify(self, state: VhostState, desired: DesiredObjects, actual: _Actual, result) -> None:
        """Mark each address whose queue/exchange, policy and bindings are all in place."""
        problems: dict[str, str] = {}
        if actual.vhost is None:
            result.vhost_errors.append("vhost does not exist")
            return
        for name, spec in desired.exchanges.items():
            have = actual.exchanges.get(name)
            if have is None or not _owned(have) or _exchange_differs(have, spec):
                _note(problems, desired.owner.get("exchange:" + name, name),
                      f"exchange {name!r} missing")
        dlx_ok = DLX_EXCHANGE not in problems
        for name, args in desired.queues.items():
            have = actual.queues.get(name)
            problem = "queue missing" if have is None else _queue_problem(have, args)
            if problem:
                _note(problems, name, problem)
        for name, spec in desired.policies.items():
            have = actual.policies.get(name)
            served = desired.policy_queues.get(name) or [desired.owner["policy:" + name]]
            if have is None or any(have.get(k) != spec[k] for k in spec):
                for queue in served:
                    _note(problems, queue, f"policy {name!r} differs")
            elif not dlx_ok and "dead-letter-exchange" in spec["definition"]:
                for queue in served:
                    _note(problems, queue, "dead-letter exchange missing")
        have_bindings = {_binding_key(b) for b in actual.bindings}
        for binding, address in desired.bindings.items():
            if binding not in have_bindings:
                _note(problems, address, f"binding {_binding_label(binding)} missing")
        for address, message in problems.items():
            if address != DLX_EXCHANGE:
                result.errors.setdefault(address, message)
        addresses = [q.name for q in state.queues] + [t.name for t in state.topics]
        result.verified = {a for a in addresses if a not in problems and a not in result.errors}
        for name, user in desired.users.items():
            have = actual.users.get(name)
            perms = actual.permissions.get(name) or {}
            wanted = desired.permissions[name]
            if have is None or _user_differs(have, user):
                result.user_errors.setdefault(name, "user missing or differs")
            elif any(perms.get(k) != wanted[k] for k in wanted):
                result.user_errors.setdefault(name, "permissions missing or differ")
            elif any((actual.topic_permissions.get(name) or {}).get(k) != w
                     for k, w in desired.topic_permissions[name].items()):
                result.user_errors.setdefault(name, "topic permissions missing or differ")
            elif name not in result.user_errors:
                result.verified_users.add(name)
        limit = actual.limits.get("max-connections")
        if state.max_connections is not None and limit != state.max_connections:
            result.vhost_errors.append("max-connections limit not applied")

    # helpers

    def _do(self, result: ApplyResult, verb: str, label: str, address: str | None, fn, *args,
            user: str | None = None) -> bool:
        """Run one mutation; record it, or record its error against the address or user.
        While converging, a create an import can make is held back (`_create` makes it) and
        counted as created meanwhile (later steps ask what this apply created)."""
        if verb == "created" and self._batch is not None and self._batch.takes(fn):
            self._batch.add(label, address, fn, *args)
            result.created.append(label)
            return True
        try:
            fn(*args)
        except BrokerError as exc:
            result.transient = result.transient or exc.transient
            if user is not None:
                result.user_errors[user] = exc.message
            elif address is not None:
                self._error(result, address, exc.message)
            else:
                result.vhost_errors.append(exc.message)
            log.warning("storage.rabbitmq.failed", extra={
                "vhost": result.vhost, "object": label, "error": exc.message,
                "transient": exc.transient,
            })
            return False
        getattr(result, verb).append(label)
        log.info("storage.rabbitmq." + verb, extra={"vhost": result.vhost, "object": label})
        return True

    @staticmethod
    def _error(result: ApplyResult, address: str | None, message: str) -> None:
        if address is None:
            result.vhost_errors.append(message)
        else:
            result.errors.setdefault(address, message)


def _is_binding(item) -> bool:
    """Whether a held-back create is a binding (made once both its ends are)."""
    return item.call[0].__name__ == "create_binding"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _concurrently(calls: dict) -> dict:
    """{name: fn()} with the calls run on a small thread pool of this process (made after a
    fork, never inherited); the first error is raised once all calls are done."""
    pool = process_pool("rabbitmq-observe", 8)
    futures = {name: pool.submit(fn) for name, fn in calls.items()}
    wait(futures.values())
    return {name: future.result() for name, future in futures.items()}


def _exchange_differs(have: dict, spec: dict) -> bool:
    """Whether an exchange of ours must be made again to be what `spec` asks."""
    return have["type"] != spec["type"] or bool(have.get("durable")) != spec["durable"]


def _exchange_args(kind: str) -> dict:
    """Arguments of an exchange MaaS makes; a topic's is metered (see INCARNATION_ARG)."""
    if kind in TOPIC_TYPES:
        return {OWNER_ARG: True, INCARNATION_ARG: _now_ms()}
    return {OWNER_ARG: True}


def _exchange_ours(name: str, actual: _Actual, result: ApplyResult) -> bool:
    """The exchange is MaaS's: listed with the owner argument, or created by this apply."""
    return _owned(actual.exchanges.get(name) or {}) or "exchange:" + name in result.created


def _queue_problem(have: dict, args: dict) -> str | None:
    """Why an existing queue cannot serve as the desired one (None if it can)."""
    if not _owned(have):
        return "a queue with this name exists, not owned by MaaS"
    current = have.get("arguments") or {}
    kind = have.get("type") or current.get("x-queue-type") or "classic"
    if args.get("x-queue-type") == "quorum" and kind != "quorum":
        # Never delete the queue to change its type: its messages would be lost.
        return (f"the {kind} queue cannot enforce maximumDeliveryAttempts (only a quorum queue "
                "can) and the type of a live queue cannot change; its messages are kept: "
                "delete and recreate the address to apply the limit")
    if current.get("x-single-active-consumer", False) != args.get(
        "x-single-active-consumer", False
    ):
        return ("queue argument x-single-active-consumer cannot change on a live queue; "
                "recreate the address")
    return None


def _user_differs(have: dict, user: BrokerUser) -> bool:
    return (
        have.get("password_hash") != user.password_hash
        or have.get("hashing_algorithm") != HASHING_ALGORITHM
        or set(_tags(have)) != {OWNER_TAG}
    )


def _differs(have: dict | None, wanted: dict) -> bool:
    """Whether permissions read from the broker differ from the wanted ones."""
    return have is None or any(have.get(k) != w for k, w in wanted.items())


def _binding_label(binding: Binding) -> str:
    return f"binding:{binding.source}->{binding.destination}:{binding.arguments}"


def _note(problems: dict[str, str], address: str, message: str) -> None:
    problems.setdefault(address, message)
