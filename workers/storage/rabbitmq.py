"""Make one RabbitMQ vhost look like a `desired.VhostState` (no Django in here).

`RabbitMQApi` is a thin client over the management HTTP API; `BrokerReconciler` is a
level-triggered, idempotent reconciler on top of it: every `apply` lists what the vhost has,
diffs it with the desired state and creates, changes or deletes only objects MaaS owns.

How addresses map to RabbitMQ objects (see docs/storage.md):

- queue, deadletter, subscription: a durable queue named as the address (clients use
  `/amq/queue/<name>`): a *classic* queue, or a *quorum* queue when the address has a
  delivery limit (maximum delivery attempts), which only quorum queues enforce. Classic
  queues cost far less (a quorum queue is a Raft log: thousands of them swamp a node).
  Queue arguments carry only what can never change (queue type, owner marker,
  single-active-consumer); TTL, dead-lettering, delivery limit and max length come from a
  per-queue policy, because policies can change on a live queue and arguments cannot. The
  type of a live queue never changes: a classic queue whose address later needs a delivery
  limit keeps its messages and reports an address error; a quorum queue whose address no
  longer needs one simply stays quorum (it serves a classic address just as well).
- topic: a durable `topic` exchange named as the address; a subscription `<topic>::<sub>` is
  bound to it with key `#`.
- dead-lettering: every queue that has a deadletter or expiry target dead-letters into one
  internal headers exchange per vhost (`$maas.dlx`); bindings on `x-first-death-queue` and
  `x-first-death-reason` (match `all-with-x`) send rejected and over-delivered messages to
  the deadletter queue and expired ones to the expiry queue.

Ownership: the vhost carries the tag `maas-owned`; queues, exchanges and MaaS's topic
bindings carry the argument `x-maas-owned: true`; policies and internal objects have names
starting with `$maas.`; users carry the tag `maas-owned` and are named `<user>@<vhost>`.
Everything else in a vhost is left alone.
"""
from __future__ import annotations

import json
import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

# Re-exported for the storage controller and tests: one implementation of the hash format.
from config_service.passwords import hash_password, verify_password  # noqa: F401

from .desired import BrokerQueue, BrokerTopic, BrokerUser, VhostState

log = logging.getLogger(__name__)

OWNER_TAG = "maas-owned"
OWNER_ARG = "x-maas-owned"
INTERNAL_PREFIX = "$maas."
DLX_EXCHANGE = "$maas.dlx"
POLICY_PREFIX = "$maas.q."
POLICY_PRIORITY = 1000  # only one policy applies to a queue: ours must win over others
VHOST_DESCRIPTION = "Managed by MaaS (storage controller)"
USER_SEPARATOR = "@"
HASHING_ALGORITHM = "rabbit_password_hashing_sha256"
AMQ_DEFAULT = r"amq\.default"  # the name RabbitMQ checks for the default exchange
TEMP_QUEUES = r"amq\.gen-.*"  # server-named queues of AMQP 1.0 receivers on /exchange/T/K

# Why a message was dead-lettered (x-first-death-reason) -> which target handles it.
REJECT_REASONS = ("rejected", "delivery_limit")
EXPIRY_REASONS = ("expired",)

QUEUE_COLUMNS = ("name", "type", "durable", "arguments")
EXCHANGE_COLUMNS = ("name", "type", "durable", "internal", "arguments")
BINDING_COLUMNS = (
    "source", "destination", "destination_type", "routing_key", "arguments", "properties_key"
)
USER_COLUMNS = ("name", "tags", "password_hash", "hashing_algorithm")


class BrokerError(Exception):
    """A failed management API call; `transient` errors are worth retrying soon."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient


# --- names and permission patterns -----------------------------------------------------


def broker_username(vhost: str, username: str) -> str:
    """The global RabbitMQ username of a messaging user of one vhost: `<user>@<vhost>`.

    '@' because RabbitMQ users are global and MQTT clients select the vhost with
    `VHOST:USER`, splitting at the *last* ':' — so the broker username must not contain ':'.
    The vhost must not contain '@', so the suffix `@<vhost>` identifies the vhost's users.
    """
    if USER_SEPARATOR in vhost:
        raise ValueError("a vhost name must not contain '@'")
    if ":" in username:
        raise ValueError("a username must not contain ':' (MQTT splits VHOST:USER at it)")
    return f"{username}{USER_SEPARATOR}{vhost}"


def pattern_regex(pattern: str) -> str:
    """An EnMasse address pattern (exact, or trailing '*' = any suffix) as a regex body."""
    if pattern.endswith("*"):
        return re.escape(pattern[:-1]) + ".*"
    return re.escape(pattern)


def pattern_matches(pattern: str, name: str) -> bool:
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


def _permission_regex(bodies: list[str]) -> str:
    """Anchor alternatives; '' grants nothing. Internal `$maas.` objects are never granted."""
    if not bodies:
        return ""
    return "^(?!" + re.escape(INTERNAL_PREFIX) + ")(" + "|".join(sorted(set(bodies))) + ")$"


def user_permissions(user: BrokerUser, queues: list[str], topics: list[str]) -> dict[str, str]:
    """RabbitMQ configure/write/read regexes for a user's EnMasse send/recv/manage rights.

    RabbitMQ checks write on the *exchange* a message is published to; AMQP 1.0 sends to
    `/amq/queue/Q` go through the default exchange, so any right to send to one queue grants
    `amq.default` and with it sending to every queue of the vhost. The router in front
    enforces the exact address rules; this is the broker's coarser second line.
    """
    sends_to_queue = any(pattern_matches(p, q) for p in user.send for q in queues)
    send_topics = [p for p in user.send if any(pattern_matches(p, t) for t in topics)]
    recv_topic = any(pattern_matches(p, t) for p in user.recv for t in topics)
    temp = [TEMP_QUEUES] if recv_topic else []  # receiving from a topic declares a temp queue
    write = ([AMQ_DEFAULT] if sends_to_queue else []) + [pattern_regex(p) for p in send_topics]
    read = [pattern_regex(p) for p in user.recv]
    configure: list[str] = []
    if user.manage:
        patterns = list(user.send) + list(user.recv)
        configure = [pattern_regex(p) for p in patterns] if patterns else [".*"]
    return {
        "configure": _permission_regex(configure + temp),
        "write": _permission_regex(write + temp),
        "read": _permission_regex(read + temp),
    }


# --- the management API client ---------------------------------------------------------


def _q(segment: str) -> str:
    return quote(segment, safe="")


class RabbitMQApi:
    """A thin client over the RabbitMQ management HTTP API (one keep-alive session)."""

    def __init__(self, base_url: str, user: str, password: str, timeout: float = 10) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.auth = (user, password)
        # RabbitMQ closes idle keep-alive connections; a request that raced such a close finds
        # the socket gone before any answer. Every call here is idempotent: retry that once.
        retry = Retry(total=1, connect=1, read=1, status=0, redirect=0, allowed_methods=None,
                      raise_on_status=False)
        self.session.mount("http://", HTTPAdapter(max_retries=retry))
        self.session.mount("https://", HTTPAdapter(max_retries=retry))

    def close(self) -> None:
        self.session.close()

    def request(self, method: str, path: str, body=None, params=None, missing_ok=False):
        """One call; returns the decoded JSON body (None when empty or missing and allowed)."""
        url = self.base_url + path
        try:
            resp = self.session.request(
                method, url, json=body, params=params, timeout=self.timeout
            )
        except requests.RequestException as exc:
            raise BrokerError(f"{method} {path}: {exc}", transient=True) from exc
        if resp.status_code == 404 and missing_ok:
            return None
        if resp.status_code >= 400:
            raise BrokerError(
                f"{method} {path}: {resp.status_code} {_reason(resp)}",
                transient=resp.status_code >= 500,
            )
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            return None

    def _list(self, path: str, columns=None, stats: bool = True) -> list[dict]:
        params = {"columns": ",".join(columns)} if columns else {}
        if not stats:
            params["disable_stats"] = "true"  # no message rates: much cheaper to list
        return self.request("GET", path, params=params or None) or []

    # vhosts
    def get_vhost(self, vhost: str) -> dict | None:
        return self.request("GET", f"/vhosts/{_q(vhost)}", params={"disable_stats": "true"},
                            missing_ok=True)

    def put_vhost(self, vhost: str, description: str = "", tags: tuple[str, ...] = ()) -> None:
        body = {"description": description, "tags": ",".join(tags)}
        self.request("PUT", f"/vhosts/{_q(vhost)}", body)

    def delete_vhost(self, vhost: str) -> None:
        self.request("DELETE", f"/vhosts/{_q(vhost)}", missing_ok=True)

    def get_vhost_limits(self, vhost: str) -> dict:
        rows = self.request("GET", f"/vhost-limits/{_q(vhost)}", missing_ok=True) or []
        return rows[0]["value"] if rows else {}

    def put_vhost_limit(self, vhost: str, name: str, value: int) -> None:
        self.request("PUT", f"/vhost-limits/{_q(vhost)}/{_q(name)}", {"value": value})

    def delete_vhost_limit(self, vhost: str, name: str) -> None:
        self.request("DELETE", f"/vhost-limits/{_q(vhost)}/{_q(name)}", missing_ok=True)

    # queues
    def list_queues(self, vhost: str, columns=QUEUE_COLUMNS) -> list[dict]:
        return self._list(f"/queues/{_q(vhost)}", columns, stats=False)

    def put_queue(self, vhost: str, name: str, arguments: dict, durable: bool = True) -> None:
        body = {"durable": durable, "auto_delete": False, "arguments": arguments}
        self.request("PUT", f"/queues/{_q(vhost)}/{_q(name)}", body)

    def delete_queue(self, vhost: str, name: str) -> None:
        self.request("DELETE", f"/queues/{_q(vhost)}/{_q(name)}", missing_ok=True)

    def purge_queue(self, vhost: str, name: str) -> None:
        # A queue not on the broker yet (its address still Configuring) holds nothing to purge.
        self.request("DELETE", f"/queues/{_q(vhost)}/{_q(name)}/contents", missing_ok=True)

    # exchanges
    def list_exchanges(self, vhost: str, columns=EXCHANGE_COLUMNS) -> list[dict]:
        return self._list(f"/exchanges/{_q(vhost)}", columns, stats=False)

    def put_exchange(
        self, vhost: str, name: str, type: str, arguments: dict,
        durable: bool = True, internal: bool = False,
    ) -> None:
        body = {
            "type": type, "durable": durable, "auto_delete": False,
            "internal": internal, "arguments": arguments,
        }
        self.request("PUT", f"/exchanges/{_q(vhost)}/{_q(name)}", body)

    def delete_exchange(self, vhost: str, name: str) -> None:
        self.request("DELETE", f"/exchanges/{_q(vhost)}/{_q(name)}", missing_ok=True)

    # bindings (exchange -> queue)
    def list_bindings(self, vhost: str, columns=BINDING_COLUMNS) -> list[dict]:
        return self._list(f"/bindings/{_q(vhost)}", columns)

    def create_binding(
        self, vhost: str, exchange: str, queue: str, routing_key: str, arguments: dict
    ) -> None:
        body = {"routing_key": routing_key, "arguments": arguments}
        self.request("POST", f"/bindings/{_q(vhost)}/e/{_q(exchange)}/q/{_q(queue)}", body)

    def delete_binding(self, vhost: str, exchange: str, queue: str, properties_key: str) -> None:
        path = f"/bindings/{_q(vhost)}/e/{_q(exchange)}/q/{_q(queue)}/{_q(properties_key)}"
        self.request("DELETE", path, missing_ok=True)

    # policies
    def list_policies(self, vhost: str) -> list[dict]:
        return self._list(f"/policies/{_q(vhost)}")

    def put_policy(
        self, vhost: str, name: str, pattern: str, definition: dict,
        priority: int = 0, apply_to: str = "queues",
    ) -> None:
        body = {
            "pattern": pattern, "definition": definition,
            "priority": priority, "apply-to": apply_to,
        }
        self.request("PUT", f"/policies/{_q(vhost)}/{_q(name)}", body)

    def delete_policy(self, vhost: str, name: str) -> None:
        self.request("DELETE", f"/policies/{_q(vhost)}/{_q(name)}", missing_ok=True)

    # users (global) and their rights in a vhost
    def list_users(self, columns=USER_COLUMNS) -> list[dict]:
        return self._list("/users", columns)

    def put_user(self, name: str, password_hash: str, tags: tuple[str, ...] = ()) -> None:
        body = {
            "password_hash": password_hash,
            "hashing_algorithm": HASHING_ALGORITHM,
            "tags": ",".join(tags),
        }
        self.request("PUT", f"/users/{_q(name)}", body)

    def delete_user(self, name: str) -> None:
        self.request("DELETE", f"/users/{_q(name)}", missing_ok=True)

    def list_permissions(self, vhost: str) -> list[dict]:
        return self._list(f"/vhosts/{_q(vhost)}/permissions")

    def put_permissions(
        self, vhost: str, user: str, configure: str, write: str, read: str
    ) -> None:
        body = {"configure": configure, "write": write, "read": read}
        self.request("PUT", f"/permissions/{_q(vhost)}/{_q(user)}", body)

    def delete_permissions(self, vhost: str, user: str) -> None:
        self.request("DELETE", f"/permissions/{_q(vhost)}/{_q(user)}", missing_ok=True)

    def list_topic_permissions(self, vhost: str) -> list[dict]:
        return self._list(f"/vhosts/{_q(vhost)}/topic-permissions")

    def put_topic_permissions(
        self, vhost: str, user: str, exchange: str, write: str, read: str
    ) -> None:
        body = {"exchange": exchange, "write": write, "read": read}
        self.request("PUT", f"/topic-permissions/{_q(vhost)}/{_q(user)}", body)

    def delete_topic_permissions(self, vhost: str, user: str) -> None:
        self.request("DELETE", f"/topic-permissions/{_q(vhost)}/{_q(user)}", missing_ok=True)


def _reason(resp: requests.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip()[:500]
    if isinstance(body, dict):
        return str(body.get("reason") or body.get("error") or body).strip()
    return str(body)[:500]


# --- desired objects -------------------------------------------------------------------


@dataclass(frozen=True)
class _Binding:
    source: str
    destination: str
    routing_key: str
    arguments: str  # canonical JSON, so bindings compare by value

    @classmethod
    def of(cls, source: str, destination: str, routing_key: str, arguments: dict) -> _Binding:
        return cls(source, destination, routing_key, json.dumps(arguments, sort_keys=True))


@dataclass
class _Desired:
    """The RabbitMQ objects of a VhostState, each tagged with the address it serves."""

    exchanges: dict[str, dict] = field(default_factory=dict)  # name -> put_exchange kwargs
    queues: dict[str, dict] = field(default_factory=dict)  # name -> arguments
    policies: dict[str, dict] = field(default_factory=dict)  # name -> put_policy kwargs
    bindings: dict[_Binding, str] = field(default_factory=dict)  # -> address
    users: dict[str, BrokerUser] = field(default_factory=dict)
    permissions: dict[str, dict] = field(default_factory=dict)  # user -> regexes
    owner: dict[str, str] = field(default_factory=dict)  # "queue:x" etc. -> address
    errors: dict[str, str] = field(default_factory=dict)  # address -> problem in the state
    user_errors: dict[str, str] = field(default_factory=dict)


def queue_type(queue: BrokerQueue) -> str:
    """quorum only where needed: RabbitMQ enforces a delivery limit on quorum queues only."""
    return "quorum" if queue.max_delivery_attempts is not None else "classic"


def queue_arguments(queue: BrokerQueue) -> dict:
    """Only what never changes: a different value later would fail (406) on redeclare."""
    args = {"x-queue-type": queue_type(queue), OWNER_ARG: True}
    if queue.kind == "subscription" and queue.max_consumers == 1:
        args["x-single-active-consumer"] = True
    return args


def policy_name(queue: str) -> str:
    return POLICY_PREFIX + queue


def policy_definition(queue: BrokerQueue, topic: BrokerTopic | None = None) -> dict:
    """The live-changeable settings of a queue; a subscription inherits unset ones from
    its topic (an exchange holds no messages, so TTL and dead-lettering live on queues)."""
    ttl, deadletter, expiry = queue.ttl_ms, queue.deadletter, queue.expiry
    if topic is not None:
        ttl = topic.ttl_ms if ttl is None else ttl
        deadletter = deadletter or topic.deadletter
        expiry = expiry or topic.expiry
    definition: dict = {}
    if ttl is not None:
        definition["message-ttl"] = ttl
    if deadletter or expiry:
        definition["dead-letter-exchange"] = DLX_EXCHANGE
    if queue.max_delivery_attempts is not None:
        # quorum queues dead-letter once a message was returned more than delivery-limit
        # times: N attempts in total = limit N - 1 (measured on 3.10).
        definition["delivery-limit"] = max(0, queue.max_delivery_attempts - 1)
    if queue.max_length_bytes is not None:
        definition["max-length-bytes"] = queue.max_length_bytes
        definition["overflow"] = "reject-publish"  # refuse senders instead of dropping old
    return definition


def dead_letter_routes(
    queue: BrokerQueue, topic: BrokerTopic | None = None
) -> list[tuple[str, str]]:
    """(reason, target queue) pairs for the queue's dead-lettered messages."""
    deadletter, expiry = queue.deadletter, queue.expiry
    if topic is not None:
        deadletter = deadletter or topic.deadletter
        expiry = expiry or topic.expiry
    routes = [(r, deadletter) for r in REJECT_REASONS if deadletter]
    routes += [(r, expiry) for r in EXPIRY_REASONS if expiry]
    return routes


def _dlx_binding(source_queue: str, reason: str, target: str) -> _Binding:
    args = {
        "x-match": "all-with-x",  # plain "all" ignores x- headers
        "x-first-death-queue": source_queue,
        "x-first-death-reason": reason,
    }
    return _Binding.of(DLX_EXCHANGE, target, "", args)


def desired_objects(state: VhostState) -> _Desired:
    d = _Desired()
    topics = {t.name: t for t in state.topics}
    queue_names = {q.name for q in state.queues}
    d.exchanges[DLX_EXCHANGE] = {"type": "headers", "internal": True}
    for topic in state.topics:
        d.exchanges[topic.name] = {"type": "topic", "internal": False}
        d.owner["exchange:" + topic.name] = topic.name
    for queue in state.queues:
        topic = topics.get(queue.topic) if queue.kind == "subscription" else None
        d.queues[queue.name] = queue_arguments(queue)
        d.owner["queue:" + queue.name] = queue.name
        if queue.kind == "subscription":
            if topic is None:
                d.errors[queue.name] = f"topic {queue.topic!r} is not in this address space"
            else:
                d.bindings[_Binding.of(topic.name, queue.name, "#", {OWNER_ARG: True})] = (
                    queue.name
                )
        definition = policy_definition(queue, topic)
        if definition:
            name = policy_name(queue.name)
            d.policies[name] = {
                "pattern": "^" + re.escape(queue.name) + "$",
                "definition": definition,
                "priority": POLICY_PRIORITY,
                "apply-to": "queues",
            }
            d.owner["policy:" + name] = queue.name
        for reason, target in dead_letter_routes(queue, topic):
            if target not in queue_names:
                d.errors[queue.name] = f"dead-letter target {target!r} is not a queue here"
                continue
            d.bindings[_dlx_binding(queue.name, reason, target)] = queue.name
    suffix = USER_SEPARATOR + state.vhost
    for user in state.users:
        if not user.username.endswith(suffix) or ":" in user.username:
            d.user_errors[user.username] = "username must be broker_username(vhost, user)"
            continue
        d.users[user.username] = user
        d.permissions[user.username] = user_permissions(
            user, sorted(queue_names), sorted(topics)
        )
    return d


# --- what the vhost has ----------------------------------------------------------------


@dataclass
class _Actual:
    vhost: dict | None
    queues: dict[str, dict]
    exchanges: dict[str, dict]
    bindings: list[dict]
    policies: dict[str, dict]
    users: dict[str, dict]  # every user that has the owner tag or is desired
    permissions: dict[str, dict]
    limits: dict

    @property
    def vhost_owned(self) -> bool:
        return self.vhost is not None and OWNER_TAG in _tags(self.vhost)


def _tags(obj: dict) -> list[str]:
    tags = obj.get("tags") or []
    if isinstance(tags, str):
        tags = [t for t in tags.split(",") if t]
    return tags


def _owned(obj: dict) -> bool:
    return (obj.get("arguments") or {}).get(OWNER_ARG) is True


def _binding_key(row: dict) -> _Binding:
    return _Binding.of(
        row["source"], row["destination"], row["routing_key"], row.get("arguments") or {}
    )


# --- results ---------------------------------------------------------------------------


@dataclass
class ApplyResult:
    """What one apply did, and which addresses and users are verified as desired."""

    vhost: str
    created: list[str] = field(default_factory=list)  # "queue:orders", "user:bob@space", ...
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
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

    def __init__(self, api: RabbitMQApi) -> None:
        self.api = api

    # public

    def apply(self, state: VhostState, verify: bool = True) -> ApplyResult:
        """Converge the vhost; raises BrokerError only when the vhost cannot be read."""
        result = ApplyResult(vhost=state.vhost)
        desired = desired_objects(state)
        result.errors.update(desired.errors)
        result.user_errors.update(desired.user_errors)
        actual = self._observe(state.vhost, desired)
        if actual.vhost is None:
            self._do(result, "created", "vhost:" + state.vhost, None, self.api.put_vhost,
                     state.vhost, VHOST_DESCRIPTION, (OWNER_TAG,))
            if result.vhost_errors:
                return result
            actual = self._observe(state.vhost, desired)
        self._converge(state, desired, actual, result)
        if verify:
            # What we listed is the proof for what we did not touch; list again what changed.
            after = self._reobserve(state.vhost, desired, actual, result)
            self._verify(state, desired, after, result)
        log.info("storage.rabbitmq.applied", extra={
            "vhost": state.vhost, "n_created": len(result.created),
            "n_updated": len(result.updated), "n_deleted": len(result.deleted),
            "n_errors": len(result.errors) + len(result.user_errors),
            "n_verified": len(result.verified),
        })
        return result

    def verify(self, state: VhostState) -> ApplyResult:
        """Re-query the vhost and report which desired addresses and users are in place."""
        result = ApplyResult(vhost=state.vhost)
        desired = desired_objects(state)
        result.errors.update(desired.errors)
        result.user_errors.update(desired.user_errors)
        self._verify(state, desired, self._observe(state.vhost, desired), result)
        return result

    def teardown(self, vhost: str) -> ApplyResult:
        """Delete what MaaS owns for the vhost: its users, and the vhost if MaaS made it
        (otherwise only MaaS's objects inside it)."""
        desired = _Desired()
        actual = self._observe(vhost, desired)
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

    def _observe(self, vhost: str, desired: _Desired) -> _Actual:
        """A handful of list calls, at the same time (the broker answers them in parallel:
        the time of the slowest, not of all); raises BrokerError if the broker cannot be read.
        """
        info = self.api.get_vhost(vhost)
        if info is None:
            return _Actual(None, {}, {}, [], {}, self._users(vhost, desired), {}, {})
        lists = _concurrently({
            "queues": lambda: {q["name"]: q for q in self.api.list_queues(vhost)},
            "exchanges": lambda: {x["name"]: x for x in self.api.list_exchanges(vhost)},
            "bindings": lambda: [b for b in self.api.list_bindings(vhost) if b["source"]],
            "policies": lambda: {p["name"]: p for p in self.api.list_policies(vhost)},
            "users": lambda: self._users(vhost, desired),
            "permissions": lambda: {p["user"]: p for p in self.api.list_permissions(vhost)},
            "limits": lambda: self.api.get_vhost_limits(vhost),
        })
        return _Actual(vhost=info, **lists)

    def _reobserve(self, vhost: str, desired: _Desired, actual: _Actual,
                   result: ApplyResult) -> _Actual:
        """`actual` with the kinds of object this apply created, changed or deleted listed
        again (one GET each): a steady apply lists nothing more, a new plain queue 1 GET.
        Only desired objects are verified, so deletions need no second look; a desired
        binding missing before the apply was created by it (and so is listed again)."""
        touched = {label.split(":", 1)[0] for label in
                   result.created + result.updated + result.deleted}
        if not touched:
            return actual
        if "vhost" in touched:
            return self._observe(vhost, desired)
        again = replace(actual)
        if "queue" in touched:
            again.queues = {q["name"]: q for q in self.api.list_queues(vhost)}
        if "exchange" in touched:
            again.exchanges = {x["name"]: x for x in self.api.list_exchanges(vhost)}
        if "binding" in touched:  # a new queue's bindings are created (touched) after it
            again.bindings = [b for b in self.api.list_bindings(vhost) if b["source"]]
        if "policy" in touched:
            again.policies = {p["name"]: p for p in self.api.list_policies(vhost)}
        if "user" in touched:
            again.users = self._users(vhost, desired)
        if touched & {"user", "permissions"}:  # deleting a user drops its permissions
            again.permissions = {p["user"]: p for p in self.api.list_permissions(vhost)}
        if "limit" in touched:
            again.limits = self.api.get_vhost_limits(vhost)
        return again

    def _users(self, vhost: str, desired: _Desired) -> dict[str, dict]:
        # RabbitMQ users are global and the API cannot filter them: one list for the vhost.
        suffix = USER_SEPARATOR + vhost
        return {
            u["name"]: u for u in self.api.list_users()
            if u["name"] in desired.users
            or (OWNER_TAG in _tags(u) and u["name"].endswith(suffix))
        }

    @staticmethod
    def _owned_users(vhost: str, actual: _Actual) -> list[str]:
        suffix = USER_SEPARATOR + vhost
        return [
            name for name, u in actual.users.items()
            if OWNER_TAG in _tags(u) and name.endswith(suffix)
        ]

    # converging

    def _converge(
        self, state: VhostState, desired: _Desired, actual: _Actual, result: ApplyResult
    ) -> None:
        """Create and update first (policies before queues, so a queue never runs without
        its limits), then delete stale objects (bindings before what they connect)."""
        v = state.vhost
        self._converge_exchanges(v, desired, actual, result)
        self._converge_policies(v, desired, actual, result)
        self._converge_queues(v, desired, actual, result)
        self._converge_bindings(v, desired, actual, result)
        self._converge_users(v, desired, actual, result)
        self._delete_stale(v, desired, actual, result)
        self._converge_limits(state, actual, result)

    def _converge_exchanges(self, v, desired: _Desired, actual: _Actual, result) -> None:
        for name, spec in desired.exchanges.items():
            have = actual.exchanges.get(name)
            address = desired.owner.get("exchange:" + name)
            if have is not None:
                if not _owned(have):
                    self._error(result, address, f"exchange {name!r} exists, not owned by MaaS")
                elif have["type"] != spec["type"]:
                    self._error(result, address, f"exchange {name!r} has type {have['type']}")
                continue
            self._do(result, "created", "exchange:" + name, address, self.api.put_exchange,
                     v, name, spec["type"], {OWNER_ARG: True}, True, spec["internal"])

    def _converge_policies(self, v, desired: _Desired, actual: _Actual, result) -> None:
        for name, spec in desired.policies.items():
            have = actual.policies.get(name)
            if have is not None and all(have.get(k) == spec[k] for k in spec):
                continue
            self._do(result, "updated" if have else "created", "policy:" + name,
                     desired.owner.get("policy:" + name), self.api.put_policy, v, name,
                     spec["pattern"], spec["definition"], spec["priority"], spec["apply-to"])

    def _converge_queues(self, v, desired: _Desired, actual: _Actual, result) -> None:
        for name, args in desired.queues.items():
            have = actual.queues.get(name)
            if have is None:
                self._do(result, "created", "queue:" + name, name, self.api.put_queue,
                         v, name, args)
                continue
            problem = _queue_problem(have, args)
            if problem:
                self._error(result, name, problem)

    def _converge_bindings(self, v, desired: _Desired, actual: _Actual, result) -> None:
        have = {_binding_key(b) for b in actual.bindings}
        for binding, address in desired.bindings.items():
            if binding in have:
                continue
            if binding.destination not in actual.queues and binding.destination in (
                result.errors
            ):
                continue  # its queue could not be created; that error says why
            self._do(result, "created", _binding_label(binding), address,
                     self.api.create_binding, v, binding.source, binding.destination,
                     binding.routing_key, json.loads(binding.arguments))

    def _converge_users(self, v, desired: _Desired, actual: _Actual, result) -> None:
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
            perms = desired.permissions[name]
            current = actual.permissions.get(name)
            if current is None or any(current.get(k) != perms[k] for k in perms):
                self._do(result, "updated" if current else "created", "permissions:" + name,
                         None, self.api.put_permissions, v, name, perms["configure"],
                         perms["write"], perms["read"], user=name)

    def _delete_stale(self, v, desired: _Desired, actual: _Actual, result) -> None:
        owned_sources = {n for n, x in actual.exchanges.items() if _owned(x)}
        for row in actual.bindings:
            key = _binding_key(row)
            ours = row["source"] == DLX_EXCHANGE or _owned(row)
            if row["destination_type"] != "queue" or not ours:
                continue
            if row["source"] in owned_sources and key not in desired.bindings:
                self._do(result, "deleted", _binding_label(key), None, self.api.delete_binding,
                         v, row["source"], row["destination"], row["properties_key"])
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

    def _verify(self, state: VhostState, desired: _Desired, actual: _Actual, result) -> None:
        """Mark each address whose queue/exchange, policy and bindings are all in place."""
        problems: dict[str, str] = {}
        if actual.vhost is None:
            result.vhost_errors.append("vhost does not exist")
            return
        for name, spec in desired.exchanges.items():
            have = actual.exchanges.get(name)
            if have is None or not _owned(have) or have["type"] != spec["type"]:
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
            if have is None or any(have.get(k) != spec[k] for k in spec):
                _note(problems, desired.owner["policy:" + name], f"policy {name!r} differs")
            elif not dlx_ok and "dead-letter-exchange" in spec["definition"]:
                _note(problems, desired.owner["policy:" + name], "dead-letter exchange missing")
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
            elif name not in result.user_errors:
                result.verified_users.add(name)
        limit = actual.limits.get("max-connections")
        if state.max_connections is not None and limit != state.max_connections:
            result.vhost_errors.append("max-connections limit not applied")

    # helpers

    def _do(self, result: ApplyResult, verb: str, label: str, address: str | None, fn, *args,
            user: str | None = None) -> bool:
        """Run one mutation; record it, or record its error against the address or user."""
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


_pool: tuple[int, ThreadPoolExecutor] | None = None


def _concurrently(calls: dict) -> dict:
    """{name: fn()} with the calls run on a small thread pool of this process (made after a
    fork, never inherited); the first error is raised once all calls are done."""
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        _pool = (os.getpid(), ThreadPoolExecutor(max_workers=8,
                                                 thread_name_prefix="rabbitmq-observe"))
    futures = {name: _pool[1].submit(fn) for name, fn in calls.items()}
    wait(futures.values())
    return {name: future.result() for name, future in futures.items()}


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


def _binding_label(binding: _Binding) -> str:
    return f"binding:{binding.source}->{binding.destination}:{binding.arguments}"


def _note(problems: dict[str, str], address: str, message: str) -> None:
    problems.setdefault(address, message)
