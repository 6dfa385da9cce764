"""The RabbitMQ management HTTP API client: `RabbitMQApi`, `BrokerError` and request helpers.

One pool of keep-alive connections per client; every call is idempotent, so a request that
raced a closed keep-alive socket is retried once; one that timed out waiting for its answer is
not (see `_RetryClosedSocket`). Errors say whether they are transient (worth retrying).
"""
from __future__ import annotations

import json
import ssl
from urllib.parse import quote, urlencode

import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    MaxRetryError,
    NewConnectionError,
    ReadTimeoutError,
)
from urllib3.util.retry import Retry

HASHING_ALGORITHM = "rabbit_password_hashing_sha256"

QUEUE_COLUMNS = ("name", "type", "durable", "arguments")
EXCHANGE_COLUMNS = ("name", "type", "durable", "internal", "arguments")
BINDING_COLUMNS = (
    "source", "destination", "destination_type", "routing_key", "arguments", "properties_key"
)
USER_COLUMNS = ("name", "tags", "password_hash", "hashing_algorithm")
# RabbitMQ answers a vhost PUT once it has started the vhost, and starts one vhost at a time:
# at 600-800 vhosts a start waited its turn for seconds, and every new space's first apply
# held an agent slot for the client's whole timeout (10 s), so changes of running spaces
# waited behind them. A vhost is made in 18 ms on an empty broker, 1.6-1.9 s at 600 vhosts.
VHOST_PUT_WAIT = 3.0


class BrokerError(Exception):
    """A failed management API call; `transient` errors are worth retrying soon."""

    def __init__(self, message: str, transient: bool) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient


class _RetryClosedSocket(Retry):
    """Retries a request whose keep-alive socket the broker had closed, never one that timed
    out waiting for its answer: the broker is still working on that one, and RabbitMQ goes
    on with it after we stop waiting (a vhost start, a definitions import). Sending it again
    only queued the same call behind the first: at 500 vhosts a vhost start took longer than
    the timeout, and an import sent twice is made twice."""

    def increment(self, method=None, url=None, response=None, error=None, _pool=None,
                  _stacktrace=None):
        if isinstance(error, ReadTimeoutError):
            raise error
        return super().increment(method, url, response, error, _pool, _stacktrace)


def _q(segment: str) -> str:
    return quote(segment, safe="")


def rows(answer) -> list[dict]:
    """The rows of a listing. An object that goes while the broker lists it answers as an
    empty row (`[]`: RabbitMQ's empty property list; seen for a vhost deleted during
    `GET /vhosts?columns=name`), which names nothing and is dropped."""
    return [row for row in answer or [] if isinstance(row, dict) and row]


# Connections kept per client: one for each thread of the observing pool (8) and the
# agent's own, so concurrent reads never open and drop sockets.
POOL_SIZE = 10


def _not_connected(exc: HTTPError) -> bool:
    reason = exc.reason if isinstance(exc, MaxRetryError) else exc
    return isinstance(reason, (NewConnectionError, ConnectTimeoutError))


class RabbitMQApi:
    """A thin client over the RabbitMQ management HTTP API (one pool of keep-alive
    connections, shared by the threads of a process).

    On urllib3 directly, not requests: a call cost 1.4 ms of CPU through a requests session
    (0.5 ms of it reading the proxy settings out of the environment, twice per call) and 0.4
    ms here, measured; the storage controller makes about 11 calls per new queue. So the API
    is always reached directly, never through an HTTP(S)_PROXY of the environment (it is an
    in-cluster service), and an https URL is verified against the system's trust store and,
    where given, the CA file `ca` (the platform's internal CA: a Kubernetes space's brokers
    serve their API over HTTPS with its certificates)."""

    def __init__(self, base_url: str, user: str, password: str, timeout: float = 10,
                 ca: str | None = None) -> None:
        # A cluster's nodes, comma-separated (config_service/brokers.py): each answers for the
        # whole cluster, so a call that cannot reach one goes to the next. `base_url`, the
        # first, names the broker (keys, logs) whichever node answers.
        self.urls = [u.strip().rstrip("/") for u in base_url.split(",") if u.strip()]
        self.base_url = self.urls[0]
        self._answering = 0  # the node that answered last
        self.user = user
        self.timeout = timeout
        self._headers = urllib3.make_headers(basic_auth=f"{user}:{password}", keep_alive=True)
        # RabbitMQ closes idle keep-alive connections; a request that raced such a close finds
        # the socket gone before any answer. Every call here is idempotent: retry that once.
        self._retry = _RetryClosedSocket(total=1, connect=1, read=1, status=0, redirect=0,
                                         allowed_methods=None, raise_on_status=False)
        # A read the broker failed while other clients changed what it lists (RabbitMQ 3.10's
        # `GET /users/without-permissions` answers 500 when a user goes meanwhile) is asked
        # up to three times more, 0.1, 0.2 and 0.4 s later (once was seen to fail again while
        # two clients deleted spaces on one broker): a read changes nothing.
        self._retry_read = _RetryClosedSocket(total=4, connect=1, read=1, status=3, redirect=0,
                                              status_forcelist=(500, 502, 503),
                                              backoff_factor=0.1, allowed_methods=None,
                                              raise_on_status=False)
        context = ssl.create_default_context()
        if ca:
            context.load_verify_locations(cafile=ca)
        self._pool = urllib3.PoolManager(num_pools=2, maxsize=POOL_SIZE, ssl_context=context)

    def close(self) -> None:
        self._pool.clear()

    def request(self, method: str, path: str, body=None, params=None, missing_ok=False,
                timeout: float | None = None):
        """One call; returns the decoded JSON body (None when empty or missing and allowed).
        `timeout` shortens this call's wait below the client's."""
        query = "?" + urlencode(params) if params else ""
        wait = self.timeout if timeout is None else min(timeout, self.timeout)
        headers = self._headers
        if body is not None:
            headers = {**headers, "Content-Type": "application/json"}
            body = json.dumps(body).encode()
        for tried in range(len(self.urls)):
            at = (self._answering + tried) % len(self.urls)
            try:
                resp = self._pool.request(
                    method, self.urls[at] + path + query, body=body, headers=headers,
                    retries=self._retry_read if method == "GET" else self._retry,
                    redirect=False, timeout=urllib3.Timeout(connect=wait, read=wait))
                self._answering = at
                break
            except HTTPError as exc:
                # not connected (refused, or no answer to connect): that node of the cluster
                # is down and nothing reached it; the next node answers for the cluster
                if _not_connected(exc) and tried < len(self.urls) - 1:
                    continue
                raise BrokerError(f"{method} {path}: {exc}", transient=True) from exc
        if resp.status == 404 and missing_ok:
            return None
        if resp.status >= 400:
            raise BrokerError(f"{method} {path}: {resp.status} {_reason(resp.data)}",
                              transient=resp.status >= 500)
        if not resp.data:
            return None
        try:
            return json.loads(resp.data)
        except ValueError:
            return None

    def listing(self, path: str, params=None, missing_ok=False,
                timeout: float | None = None) -> list[dict]:
        """The rows a listing call answers (`rows`); [] for a missing one allowed."""
        return rows(self.request("GET", path, params=params, missing_ok=missing_ok,
                                 timeout=timeout))

    def _list(self, path: str, columns=None, stats: bool = True) -> list[dict]:
        params = {"columns": ",".join(columns)} if columns else {}
        if not stats:
            params["disable_stats"] = "true"  # no message rates: much cheaper to list
        return self.listing(path, params=params or None)

    def vhost_names(self) -> list[str]:
        """The names of the broker's vhosts (no statistics)."""
        return [row["name"] for row in self._list("/vhosts", ("name",), stats=False)]

    def exchange_types(self) -> set[str]:
        """The exchange types every node of the broker knows (plugins' included). Read from
        `/nodes`, not `/overview`: the overview works out the whole broker's totals first (40 s
        at 330 vhosts of 100 queues, measured, where `/nodes` took 0.07 s)."""
        nodes = self.listing("/nodes", params={"columns": "name,exchange_types"})
        known = [{t["name"] for t in node.get("exchange_types") or []} for node in nodes]
        return set.intersection(*known) if known else set()

    # vhosts
    def get_vhost(self, vhost: str) -> dict | None:
        return self.request("GET", f"/vhosts/{_q(vhost)}", params={"disable_stats": "true"},
                            missing_ok=True)

    def put_vhost(self, vhost: str, description: str = "", tags: tuple[str, ...] = ()) -> None:
        """Records the vhost and waits up to VHOST_PUT_WAIT for RabbitMQ to start it; past
        that, a transient BrokerError (the broker goes on with the start, and an apply that
        finds the vhost not running yet is retried: `require_running`)."""
        body = {"description": description, "tags": ",".join(tags)}
        self.request("PUT", f"/vhosts/{_q(vhost)}", body, timeout=VHOST_PUT_WAIT)

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

    def get_queue(self, vhost: str, name: str, columns=QUEUE_COLUMNS) -> dict | None:
        return self.request("GET", f"/queues/{_q(vhost)}/{_q(name)}", missing_ok=True,
                            params={"columns": ",".join(columns), "disable_stats": "true"})

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

    def get_exchange(self, vhost: str, name: str, columns=EXCHANGE_COLUMNS) -> dict | None:
        return self.request("GET", f"/exchanges/{_q(vhost)}/{_q(name)}", missing_ok=True,
                            params={"columns": ",".join(columns), "disable_stats": "true"})

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

    # bindings (exchange -> queue, or exchange -> exchange)
    def list_bindings(self, vhost: str, columns=BINDING_COLUMNS) -> list[dict]:
        return self._list(f"/bindings/{_q(vhost)}", columns)

    def list_source_bindings(
        self, vhost: str, exchange: str, columns=BINDING_COLUMNS
    ) -> list[dict]:
        """The bindings whose source is `exchange`."""
        return self._list(f"/exchanges/{_q(vhost)}/{_q(exchange)}/bindings/source", columns)

    def list_bindings_between(
        self, vhost: str, exchange: str, destination: str, destination_type: str = "queue",
        columns=BINDING_COLUMNS,
    ) -> list[dict]:
        """The bindings from `exchange` to `destination` (none when either is missing)."""
        path = _binding_path(vhost, exchange, destination, destination_type)
        return self.listing(path, params={"columns": ",".join(columns)}, missing_ok=True)

    def create_binding(
        self, vhost: str, exchange: str, destination: str, routing_key: str, arguments: dict,
        destination_type: str = "queue",
    ) -> None:
        body = {"routing_key": routing_key, "arguments": arguments}
        path = _binding_path(vhost, exchange, destination, destination_type)
        self.request("POST", path, body)

    def delete_binding(
        self, vhost: str, exchange: str, destination: str, properties_key: str,
        destination_type: str = "queue",
    ) -> None:
        path = _binding_path(vhost, exchange, destination, destination_type)
        self.request("DELETE", f"{path}/{_q(properties_key)}", missing_ok=True)

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

    # definitions
    def vhost_definitions(self, vhost: str) -> dict:
        """The vhost's `queues`, `exchanges`, `bindings` and `policies` in one read, without
        statistics. Unlike the lists: RabbitMQ's own exchanges (the default one and `amq.*`)
        are left out, a binding has no `properties_key` and a queue no `type` (its
        `x-queue-type` argument says it). On a node of 250 vhosts it cost about half the
        broker's CPU of the four lists (docs/scale.md, "Cheaper drift checks")."""
        return self.request("GET", f"/definitions/{_q(vhost)}") or {}

    def import_definitions(self, vhost: str, definitions: dict) -> None:
        """Creates the `queues`, `exchanges`, `bindings` and `policies` of `definitions` in the
        vhost in one call (RabbitMQ imports policies first, then queues, exchanges, bindings).
        Objects already there as given are left alone. Not atomic: a refused import may leave
        the objects it imported before the refused one (each is a create that can be redone)."""
        self.request("POST", f"/definitions/{_q(vhost)}", definitions)

    # users (global) and their rights in a vhost
    def list_users(self, columns=USER_COLUMNS) -> list[dict]:
        """Every user of the broker: for tests and tools, never for one space's reconcile."""
        return self._list("/users", columns)

    def get_user(self, name: str) -> dict | None:
        return self.request("GET", f"/users/{_q(name)}", missing_ok=True)

    def list_users_without_permissions(self, columns=USER_COLUMNS) -> list[dict]:
        """The users that have no permissions on any vhost (on a healthy broker: few or none)."""
        return self._list("/users/without-permissions", columns)

    def put_user(self, name: str, password_hash: str, tags: tuple[str, ...] = ()) -> None:
        body = {
            "password_hash": password_hash,
            "hashing_algorithm": HASHING_ALGORITHM,
            "tags": ",".join(tags),
        }
        self.request("PUT", f"/users/{_q(name)}", body)

    def put_user_limit(self, name: str, limit: str, value: int) -> None:
        self.request("PUT", f"/user-limits/{_q(name)}/{_q(limit)}", {"value": value})

    def delete_user_limit(self, name: str, limit: str) -> None:
        self.request("DELETE", f"/user-limits/{_q(name)}/{_q(limit)}", missing_ok=True)

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

    # connections
    def close_user_connections(self, user: str) -> None:
        """Closes every connection of the user (clients see CONNECTION_FORCED)."""
        self.request("DELETE", f"/connections/username/{_q(user)}", missing_ok=True)

    def list_topic_permissions(self, vhost: str) -> list[dict]:
        return self._list(f"/vhosts/{_q(vhost)}/topic-permissions")

    def put_topic_permissions(
        self, vhost: str, user: str, exchange: str, write: str, read: str
    ) -> None:
        body = {"exchange": exchange, "write": write, "read": read}
        self.request("PUT", f"/topic-permissions/{_q(vhost)}/{_q(user)}", body)

    def delete_topic_permissions(self, vhost: str, user: str) -> None:
        self.request("DELETE", f"/topic-permissions/{_q(vhost)}/{_q(user)}", missing_ok=True)


def _binding_path(vhost: str, exchange: str, destination: str, destination_type: str) -> str:
    kind = {"queue": "q", "exchange": "e"}[destination_type]
    return f"/bindings/{_q(vhost)}/e/{_q(exchange)}/{kind}/{_q(destination)}"


def _reason(data: bytes) -> str:
    try:
        body = json.loads(data)
    except ValueError:
        return data.decode(errors="replace").strip()[:500]
    if isinstance(body, dict):
        return str(body.get("reason") or body.get("error") or body).strip()
    return str(body)[:500]
