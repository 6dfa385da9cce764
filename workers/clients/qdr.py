"""A client of Qpid Dispatch Router's AMQP management protocol (`$management`).

Works against qdrouterd / skupper-router and MaaS's embedded router alike: requests from a
sender to `$management` with application properties `operation`, `type`/`entityType` and
`name`/`identity`; replies to a dynamic receiver with `statusCode` and `statusDescription`.
"""
import itertools
import logging
import os
import threading
import time
import uuid
from collections import defaultdict

from proton import (
    ConnectionException,
    Message,
    SSLDomain,
    SSLException,
    SSLUnavailable,
    Timeout,
)
from proton.reactor import Container
from proton.utils import BlockingConnection, LinkDetached

logger = logging.getLogger(__name__)

ROUTER = "org.apache.qpid.dispatch.router"
# Rows per QUERY answer: a few thousand proton nodes, far below the 65,535 of one message.
QUERY_PAGE = 500


class ManagementError(Exception):
    """The router answered with an error status (4xx, 5xx)."""

    def __init__(self, status: int, description: str):
        super().__init__(f"{status} {description}")
        self.status = status
        self.description = description


class RouterUnreachable(Exception):
    """No connection to the router's management (it may be restarting)."""


class SharedSslContainer(Container):
    """proton's Container, with one SSL configuration per process instead of one each.

    proton makes a client and a server OpenSSL context for every Container, whatever the URL:
    about 50 ms of CPU on OpenSSL 3 (measured), so opening a management connection cost that
    much, once a second for the router watch and after every idle spell for the agents. Nothing
    ever changes these default contexts, so one pair serves every connection of the process.
    The rest is what Container.__init__ sets up (tests/workers/test_qdr_container.py checks
    that it still matches the installed proton)."""

    _ssl: tuple[int, object] | None = None  # (pid, proton's SSLConfig or None)
    _ssl_lock = threading.Lock()

    def __init__(self):
        super().__init__(impl=None)  # `impl`: Container.__init__ leaves its own set-up out
        self.ssl = self._shared_ssl()
        from proton._reactor import GlobalOverrides

        self.global_handler = GlobalOverrides(self.global_handler)
        self.trigger = None
        self.container_id = str(uuid.uuid4())
        self.allow_insecure_mechs = True
        self.allowed_mechs = None
        self.sasl_enabled = True
        self.user = None
        self.password = None

    @classmethod
    def _shared_ssl(cls):
        from proton._reactor import SSLConfig

        with cls._ssl_lock:
            if cls._ssl is None or cls._ssl[0] != os.getpid():  # never a parent's, after fork
                try:
                    cls._ssl = (os.getpid(), SSLConfig())
                except SSLUnavailable:
                    cls._ssl = (os.getpid(), None)
            return cls._ssl[1]


_domains: dict[tuple[int, str], SSLDomain] = {}
_domains_lock = threading.Lock()


def client_domain(ca: str, check_name: bool = False) -> SSLDomain:
    """TLS to a management listener (an `amqps://` URL): the router's certificate chain checked
    against `ca`, and with `check_name` its name too (else not: whatever address reaches it).
    One per process, CA and choice: each is an OpenSSL context, about 50 ms to make."""
    key = (os.getpid(), ca, check_name)
    with _domains_lock:
        if key not in _domains:
            domain = SSLDomain(SSLDomain.MODE_CLIENT)
            domain.set_trusted_ca_db(ca)
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME if check_name
                                           else SSLDomain.VERIFY_PEER)
            _domains[key] = domain
        return _domains[key]


def _names_a_host(url: str) -> bool:
    """Whether the URL reaches the router by a DNS name (a Kubernetes router pod, whose
    certificate names it), not by an IP address (one machine's loopback: proton 0.37 compares
    DNS names only, so a certificate's IP address would never match)."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host not in ("", "localhost")
    return False


class Management:
    def __init__(self, url: str, user: str | None = None, password: str | None = None,
                 timeout: float = 10.0, ca: str | None = None):
        """`ca`: what an `amqps://` router's certificate is checked against (and its name,
        where the URL names a host)."""
        began = time.monotonic()
        try:
            tls = {"ssl_domain": client_domain(ca, _names_a_host(url))} \
                if ca and url.startswith("amqps:") else {}
        except SSLException as exc:  # a CA file missing or unreadable: nothing to check with
            raise RouterUnreachable(f"router management at {url}: cannot use {ca} to check "
                                    f"its certificate ({exc})") from exc
        try:
            self.conn = BlockingConnection(url, user=user, password=password, timeout=timeout,
                                           container=SharedSslContainer(), **tls,
                                           allowed_mechs="PLAIN" if user else "ANONYMOUS",
                                           allow_insecure_mechs=True)
            self.receiver = self.conn.create_receiver(None, dynamic=True)
            self.sender = self.conn.create_sender("$management")
        except (ConnectionException, Timeout, LinkDetached, OSError) as exc:
            raise RouterUnreachable(f"router management at {url}: {exc}") from exc
        self.opened_in = time.monotonic() - began  # seconds (diagnostics: where time went)
        # Seconds waited for answers, by the first request's operation and entity type.
        self.waited: dict[str, float] = defaultdict(float)
        self.reply_to = self.receiver.remote_source.address
        self.url, self.user = url, user
        self.pooled = False  # kept between reconciles (workers/agents/router/pool.py)
        # The policy vhosts of the router's tenant listeners, read once per connection
        # (workers/agents/router/agent.py, serves_only): listeners are static configuration.
        self.serves_only: set | None = None
        # {space field: digest} of the policies applied or read on this connection
        # (workers/agents/router/applied.py): none outlives the router run it was made with.
        self.applied_policy: dict[str, str] = {}
        self._ids = itertools.count(1)
        self.timeout = timeout
        self._schema: dict[str, frozenset] | None = None
        self.rows_read = 0  # entities read by QUERY or READ (tests, benchmarks)

    def request(self, operation: str, body=None, **properties):
        """One request's reply body; ManagementError if the router refused it."""
        outcome = self.many([(operation, body, properties)])[0]
        if isinstance(outcome, ManagementError):
            raise outcome
        return outcome

    # Requests in flight at once on one connection (`many`): enough to hide the round trips of a
    # space's entities, few enough that the replies waiting for this client stay small.
    WINDOW = 64

    def many(self, calls) -> list:
        """Each (operation, body, properties) sent without waiting for the reply of the one
        before, up to WINDOW in flight: the reply bodies, in order, or for a request the router
        refused its ManagementError. qdrouterd hands some entity types to another agent than
        others, so requests that depend on each other go in separate calls."""
        calls = list(calls)
        if not calls:
            return []
        began = time.monotonic()
        try:
            return self._many(calls)
        finally:
            operation, _, properties = calls[0]
            etype = str(properties.get("type") or properties.get("entityType") or "")
            self.waited[f"{operation} {etype.rsplit('.', 1)[-1]}".strip()] += (
                time.monotonic() - began)

    def _many(self, calls: list) -> list:
        results: list = [None] * len(calls)
        waiting: dict[str, int] = {}  # correlation id -> index
        link, fetcher = self.sender.link, self.receiver.fetcher
        deliveries: list = []
        sent = 0

        def sendable() -> bool:
            return sent < len(calls) and len(waiting) < self.WINDOW and link.credit > 0

        try:
            if self.receiver.link.credit < self.WINDOW:
                self.receiver.link.flow(self.WINDOW - self.receiver.link.credit)
            while sent < len(calls) or waiting:
                while sendable():
                    operation, body, properties = calls[sent]
                    correlation = str(next(self._ids))
                    # A string: qdrouterd's Python agent (vhost, connector...) echoes no other.
                    deliveries.append(link.send(Message(
                        body=body, reply_to=self.reply_to, correlation_id=correlation,
                        properties={**properties, "operation": operation})))
                    waiting[correlation] = sent
                    sent += 1
                self.conn.wait(lambda: fetcher.has_message or sendable(),
                               timeout=self.timeout, msg="management replies")
                while fetcher.has_message:
                    reply = fetcher.pop()  # replies come pre-settled
                    index = waiting.pop(reply.correlation_id, None)
                    if index is not None:
                        results[index] = _outcome(reply)
                    if self.receiver.link.credit < self.WINDOW // 2:
                        self.receiver.link.flow(self.WINDOW - self.receiver.link.credit)
            # Settled here once the router settled them, as BlockingSender.send does: a kept
            # connection sends thousands, and proton keeps each delivery until then.
            self.conn.wait(lambda: all(d.settled for d in deliveries), timeout=self.timeout,
                           msg="management requests settled")
        except (ConnectionException, Timeout, LinkDetached) as exc:
            raise RouterUnreachable(str(exc)) from exc
        for delivery in deliveries:
            delivery.settle()
        return results

    def schema(self) -> dict[str, frozenset]:
        """{entity type: its attribute names} as this router declares them (GET-ATTRIBUTES,
        asked once per connection): which MaaS extensions it has, which attributes exist."""
        if self._schema is None:
            body = self.request("GET-ATTRIBUTES", None) or {}
            self._schema = {str(t): frozenset(map(str, names or ())) for t, names in body.items()}
        return self._schema

    def query(self, entity_type: str, attributes=(), name_prefix: str = "",
              page: int = QUERY_PAGE) -> list[dict]:
        """Every entity of the type (only those named `name_prefix`... if given), with the
        given attributes (all if none are given), read `page` rows per request.

        Paged with qdrouterd's `count` and `offset`: one answer holding every row of a big
        router would pass proton's limit of 65,535 nodes per message and fail to encode. A
        router that ignores paging (qdrouterd's Python-agent types such as vhost) answers
        everything at once, which ends the loop. `namePrefix` is the embedded router's
        extension: it answers only matching rows, from an index, so a reconcile reads its own
        space, not the fleet; qdrouterd ignores the property, hence the filter here too."""
        properties = {"namePrefix": name_prefix} if name_prefix else {}
        body = self.request("QUERY", {"attributeNames": list(attributes)}, entityType=entity_type,
                            count=page, offset=0, **properties)
        rows = self._pages(entity_type, attributes, body, page, properties)
        if name_prefix:
            rows = [r for r in rows if str(r.get("name", "")).startswith(name_prefix)]
        return rows

    def query_many(self, queries, page: int = QUERY_PAGE, **properties) -> list[list[dict]]:
        """What `query` reads for each (entity type, attributes), the first page of every one
        sent at once (`many`): queries that do not depend on each other wait for one round
        trip, not one each. `properties` go with every request (an extension such as the
        embedded router's `vhost`, which qdrouterd ignores: filter the rows too)."""
        queries = list(queries)
        firsts = self.many([("QUERY", {"attributeNames": list(attributes)},
                             {"entityType": entity_type, "count": page, "offset": 0,
                              **properties})
                            for entity_type, attributes in queries])
        out = []
        for (entity_type, attributes), body in zip(queries, firsts, strict=True):
            if isinstance(body, ManagementError):
                raise body
            out.append(self._pages(entity_type, attributes, body, page, properties))
        return out

    def _pages(self, entity_type: str, attributes, body, page: int, properties: dict) -> list:
        """The rows of a QUERY's first answer `body` and of its later pages, read in turn."""
        rows: list[dict] = []
        offset = 0
        while True:
            names, results = body["attributeNames"], body["results"]
            self.rows_read += len(results)
            rows.extend(dict(zip(names, row, strict=True)) for row in results)
            if len(results) != page:  # the last page, or a router that does not page
                return rows
            offset += page
            body = self.request("QUERY", {"attributeNames": list(attributes)},
                                entityType=entity_type, count=page, offset=offset, **properties)

    def uptime_seconds(self) -> int:
        """Seconds since the router started (`uptimeSeconds` of the router entity, qdrouterd
        1.x and the embedded router); a restart resets it."""
        rows = self.request("QUERY", {"attributeNames": ["uptimeSeconds"]},
                            entityType=ROUTER)["results"]
        if not rows or rows[0][0] is None:
            raise ManagementError(501, "The router reports no uptimeSeconds")
        return int(rows[0][0])

    def read(self, entity_type: str, name: str) -> dict | None:
        """The entity's attributes, or None if the router has no entity of that name."""
        return self.read_many([(entity_type, name)])[0]

    def read_many(self, keys) -> list[dict | None]:
        """The attributes of each (entity type, name), READ at once (`many`), or None for one
        the router has no entity of; raises the first other refusal."""
        rows = []
        for answer in self.many(("READ", None, {"type": etype, "name": name})
                                for etype, name in keys):
            if isinstance(answer, ManagementError):
                if answer.status != 404:
                    raise answer
                answer = None
            else:
                self.rows_read += 1
            rows.append(answer)
        return rows

    def create(self, entity_type: str, name: str, attributes: dict) -> dict:
        return self.request("CREATE", attributes, type=entity_type, name=name)

    def update(self, entity_type: str, name: str, attributes: dict) -> dict:
        return self.request("UPDATE", attributes, type=entity_type, name=name)

    def delete(self, entity_type: str, name: str) -> None:
        try:
            self.request("DELETE", None, type=entity_type, name=name)
        except ManagementError as exc:
            if exc.status != 404:  # already gone is what we wanted
                raise

    # A close waits this long for the router's close frame: a router that is gone or stopped
    # (SIGSTOP, a partition) never sends one, and the connection is let go anyway.
    CLOSE_TIMEOUT = 1.0

    def close(self) -> None:
        self.conn.timeout = min(self.conn.timeout, self.CLOSE_TIMEOUT)
        try:
            self.conn.close()
        except (ConnectionException, Timeout):
            pass


def _outcome(reply: Message):
    """A reply's body, or the ManagementError its status says."""
    status = int(reply.properties.get("statusCode", 500))
    if not 200 <= status < 300:
        return ManagementError(status, str(reply.properties.get("statusDescription", "")))
    return reply.body


def router_address(row: dict) -> tuple[str, int]:
    """(address, phase) of a `router.address` (or a link's `owningAddr`): the embedded router
    names both; qdrouterd gives only its hash key, `M<phase><address>` for the addresses
    clients use. ("", 0) for the router's own (local, topological, link-route) keys."""
    if row.get("address"):
        return str(row["address"]), int(row.get("phase") or 0)
    key = str(row.get("key") or row.get("owningAddr") or "")
    if len(key) > 2 and key[0] == "M" and key[1].isdigit():
        return key[2:], int(key[1])
    return "", 0


def tenant_of(connection: dict) -> str:
    """A connection's vhost: qdrouterd reports its tenant space with the trailing `/`."""
    return str(connection.get("tenant") or "").rstrip("/")
