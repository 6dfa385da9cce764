"""The router agent: configures a space's router over AMQP management, EnMasse style.

Per reconcile it builds the desired entities (router_config), QUERYs the router, deletes its
own entities that are stale or differ, creates what is missing (bounded concurrency is the
router's request pipeline: one connection, requests in order), verifies with what the router's
answers confirm, and waits briefly for the queues' autoLinks to attach. A router restarted empty is configured again at
once, through this agent, by the router watch (router_watch.py). Only entities named
`maas:<vhost>:...` are ever touched.

One module of 510-odd lines: the reconcile, its verification and its status report all work on
one desired/actual pair; what stands alone is beside it (pool.py, tables.py, touched.py,
applied.py, connectors.py).
"""
import logging
import time

from django.conf import settings

from config_service.models import Address, AddressSpace
from config_service.status import ROUTER_ONLY_TYPES
from workers import certificates, credentials, endpoints
from workers.agents import statements
from workers.agents.router import applied, connectors, pool, tables, touched
from workers.agents.router import desired as rc
from workers.agents.router.pool import (  # noqa: F401 - this module's interface too
    POOL_IDLE_SECONDS,
    close_pooled,
    pooled_count,
)
from workers.agents.runner import (
    Agent,
    Report,
    TransientError,
    agent_state,
    only_creates,
    pending_events,
)
from workers.clients.qdr import QUERY_PAGE, Management, ManagementError, RouterUnreachable
from workers.naming import broker_username

logger = logging.getLogger(__name__)

AUTOLINK_WAIT_SECONDS = 3.0


def management_client(router: endpoints.RouterEndpoint | None = None) -> Management:
    """A management connection to `router` (default: the shared one of the settings)."""
    router = router or endpoints.shared_router()
    return Management(router.management_url, router.admin_user, router.admin_password,
                      ca=router.management_ca)


def entity_types(mgmt: Management) -> list[str]:
    """The agent's entity types this router has (a router answers a QUERY of a type it lacks
    with 400 or 404)."""
    schema = mgmt.schema()
    return [etype for etype in rc.ENTITY_TYPES if etype in schema]


def features(mgmt: Management, vhost: str | None = None) -> rc.RouterFeatures:
    found = rc.RouterFeatures.of(mgmt.schema())
    if vhost is not None and not found.exact_message_targets:
        found = found._replace(serves_one_space=serves_only(mgmt, vhost))
    return found


def serves_only(mgmt: Management, vhost: str) -> bool:
    """True if every tenant listener of this qdrouterd (`multiTenant`) takes `vhost` as its
    policy vhost: the router serves that space alone (dataplane/qdrouterd.py, `tenant_vhost`).
    A few rows, read once per connection (listeners are static configuration): qdrouterd's
    Python agent answers them, one request at a time, 28-58 ms at 1,000 spaces."""
    if mgmt.serves_only is None:
        tenant = [row for row in mgmt.query(rc.LISTENER, ["name", "multiTenant", "policyVhost"])
                  if row.get("multiTenant")]
        mgmt.serves_only = ({row.get("policyVhost") for row in tenant} if tenant
                            else {None, ""})  # no tenant listener: serves no space alone
    return mgmt.serves_only == {vhost}


def _owned(mgmt: Management, prefix: str, desired: dict) -> dict:
    # Only the attributes the diff and the verification look at, and only this space's
    # entities where the router can filter by name (the embedded router; qdrouterd answers
    # every space's, filtered here: on Kubernetes each space has its own router anyway).
    wanted: dict = {etype: {"name"} for etype in rc.ENTITY_TYPES}
    wanted[rc.AUTO_LINK].add("operStatus")
    # Which host a remote connector's links use (connectors.connected)
    wanted[rc.CONNECTOR].update(("connectionStatus", "connectionMsg"))
    for (etype, _), attributes in desired.items():
        wanted[etype].update(k for k in attributes if k not in rc.WRITE_ONLY)
    actual = {}
    for etype in entity_types(mgmt):
        read_before = mgmt.rows_read
        rows = mgmt.query(etype, sorted(wanted[etype]), name_prefix=prefix)
        actual.update(((etype, row["name"]), row) for row in rows)
        read = mgmt.rows_read - read_before
        if read > len(rows):
            tables.note_shared(mgmt.url)  # its next full diffs start from its whole tables
        if read >= QUERY_PAGE and read > len(rows):
            # A router that does not filter (qdrouterd), read in pages while other spaces
            # changed its table: one of ours may have moved across a page boundary unseen.
            # Ask for each desired one not seen by name. (The embedded router answers every
            # page of a read from one snapshot.)
            for key in desired:
                if key[0] == etype and key not in actual:
                    row = mgmt.read(etype, key[1])
                    if row is not None:
                        actual[key] = {k: row.get(k) for k in wanted[etype]}
    return actual


def apply(mgmt: Management, desired: dict, prefix: str, actual: dict | None = None,
          refused: dict | None = None) -> dict:
    """Brings the router to `desired`; returns the owned entities afterwards, as the router
    confirmed them (each CREATE and UPDATE answers with the entity it now holds), so a
    reconcile reads the router's whole tables once, not twice. `actual`: what the router holds
    of this space, if it was just read (a snapshot of many spaces); else it is queried.
    `refused`: if given, an entity the router refuses is recorded there ({key: error}) and the
    rest is still applied; else the first refusal raises ManagementError, once its round is
    answered."""
    if actual is None:
        actual = _owned(mgmt, prefix, desired)
    # A remote connector's links go to the first of its hosts that is connected now.
    connectors.route_to_connected(desired, actual, rc.LINK_ROUTE, rc.CONNECTOR)
    stale = [k for k in actual if k not in desired]
    changed = [k for k in desired if k in actual and rc.differs(desired[k], actual[k])]
    order = {t: i for i, t in enumerate(rc.ENTITY_TYPES)}
    after = {k: v for k, v in actual.items() if k not in stale}

    def attempt(calls) -> list:
        """[(key, operation, attributes)] sent at once (Management.many): each answer, or
        None for a refusal, which is recorded in `refused` (else the first one raises)."""
        if not calls:
            return []
        # Recorded before they are sent and again once answered (the later time counts): tables
        # read meanwhile, here or in another process, learn which rows to read anew, however
        # long the requests took to land (tables.py). Unknown (Redis down): nothing is sent.
        keys = [key for key, _, _ in calls]
        touched.record(mgmt.url, prefix, keys)
        try:
            answers = mgmt.many((operation, body, {"type": key[0], "name": key[1]})
                                for key, operation, body in calls)
        finally:
            touched.record(mgmt.url, prefix, keys)
        out = []
        for (key, operation, _), answer in zip(calls, answers, strict=True):
            if isinstance(answer, ManagementError):
                if operation == "DELETE" and answer.status == 404:
                    answer = None  # already gone is what we wanted
                elif refused is None:
                    raise answer
                else:
                    refused[key] = answer
                    logger.warning("router.refused", extra={"entity": key[1], "type": key[0],
                                                            "error": str(answer)})
                    answer = None
            out.append(answer)
        return out

    # Three rounds, each sent at once: what goes, what changes, what is new. A changed entity
    # other than a vhost (kept, so its clients stay connected) is deleted in the first and
    # created again in the third.
    replaced = [k for k in changed if k[0] != rc.VHOST]
    attempt([(key, "DELETE", None) for key in
             sorted(stale, key=lambda k: -order[k[0]]) + replaced])
    for key in replaced:
        del after[key]
    updates = [(key, "UPDATE", desired[key]) for key in changed if key[0] == rc.VHOST]
    for (key, _, body), answer in zip(updates, attempt(updates), strict=True):
        if key not in (refused or {}):
            after[key] = _confirmed(body, answer)
    creates = [(key, "CREATE", desired[key]) for key in sorted(desired, key=lambda k: order[k[0]])
               if key not in after and key not in (refused or {})]
    for (key, _, body), answer in zip(creates, attempt(creates), strict=True):
        if key not in (refused or {}):
            after[key] = _confirmed(body, answer)
    if stale or changed or len(actual) != len(desired):
        logger.info("router.applied", extra={"owner": prefix, "n_deleted": len(stale),
                                             "n_changed": len(changed),
                                             "n_created": len(set(desired) - set(actual))})
    return after


def _policy_keys(desired: dict) -> list:
    """The keys of the space-wide entities in `desired`: its vhost policy, its connectors
    (broker, mesh, remote) and the remote connectors' TLS profiles and link routes."""
    return [key for key in desired if rc.is_space_wide(key)]


def _timed(mgmt: Management, work) -> Report:
    """work()'s report, with where its time went on `mgmt`: the connection's opening if it
    was new, and the answers waited for by kind of request, in ms."""
    opened, before = not mgmt.waited, dict(mgmt.waited)  # nothing asked on it yet: new
    report = work()
    report.timings = {kind: round((seconds - before.get(kind, 0.0)) * 1000)
                      for kind, seconds in list(mgmt.waited.items())
                      if seconds > before.get(kind, 0.0)}
    if opened:
        report.timings["open"] = round(mgmt.opened_in * 1000)
    return report


def _confirmed(desired: dict, answer) -> dict:
    """The entity as a CREATE or UPDATE answered it; attributes a router does not echo (a
    password hash) are what was sent."""
    return {**desired, **(answer if isinstance(answer, dict) else {})}


def broker_login(broker: endpoints.BrokerEndpoint, cluster: str, username: str, password: str,
                 features: rc.RouterFeatures) -> rc.BrokerLogin:
    """How the router reaches one broker of the space (`cluster`: the placements' name of it,
    "" for a space's one broker)."""
    # Over TLS where the broker has it (its listener's, or its relay's, certificate is the
    # internal CA's): the router's login never crosses in clear text. On one machine not from
    # qdrouterd, which reaches its brokers through the relay in plain AMQP on loopback: a TLS
    # connector of qdrouterd 1.19 whose connection ended in error after the connector was
    # deleted crashed the router. On Kubernetes the space's brokers listen with TLS only, on
    # the pod network, and its qdrouterd reaches them directly (docs/deploy.md says the risk).
    kubernetes = settings.MAAS_INFRA_BACKEND == "kubernetes"
    tls = bool(broker.broker_ca) and (features.connector_virtual_host or kubernetes)
    host, port = broker.amqp_host, broker.amqps_port if tls else broker.amqp_port
    relayed = not features.connector_virtual_host or broker.cluster
    if relayed and not kubernetes:
        # The shared RabbitMQ of one machine: only the vhost relay puts a router without
        # the virtualHost extension into the space's vhost (docs/router.md); and a
        # cluster's relay takes the router to another node when one is gone. It listens
        # with TLS only when it reaches the broker with TLS (runplatform).
        host = settings.MAAS_VHOST_RELAY_HOST
        port = broker.relay_port or settings.MAAS_VHOST_RELAY_PORT  # the relay to its broker
    return rc.BrokerLogin(host, port, username, password, tls, cluster)


class RouterAgent(Agent):
    kind = "router"

    def __init__(self, management: Management | None = None,
                 snapshot: tables.Tables | None = None):
        # A connection to reuse (the router watch restores many spaces over one); by default
        # each reconcile opens and closes its own. `snapshot` (tables.read), if given, is what
        # the router held of every space when the restore began.
        self.management, self.snapshot = management, snapshot

    def _connect(self, where: endpoints.SpaceEndpoints) -> Management:
        if self.management:
            return self.management
        kept = pool.take(where.router)
        if kept is not None:
            return kept
        try:
            return management_client(where.router)
        except RouterUnreachable as exc:
            raise TransientError(str(exc), soon=True) from exc

    def _release(self, mgmt: Management, broken: bool = False) -> None:
        if mgmt is self.management:
            return
        if broken:
            mgmt.close()
        else:
            pool.give_back(mgmt)

    @staticmethod
    def _fresh(where: endpoints.SpaceEndpoints) -> Management:
        try:
            return management_client(where.router)
        except RouterUnreachable as exc:
            raise TransientError(str(exc), soon=True) from exc

    def _desired(self, space: AddressSpace, where: endpoints.SpaceEndpoints | None = None,
                 features: rc.RouterFeatures = rc.EMBEDDED, addresses: list | None = None):
        """(addresses, desired entities, their keys by address) of the space; `addresses`:
        only these (the short path), with the space's own entities as always."""
        if addresses is None:
            addresses = list(Address.objects.filter(space=space, scheduled=True))
        users = statements.messaging_users(space)
        user, password = credentials.router_broker(space.vhost)
        where = where or endpoints.of(space)
        logins = tuple(
            broker_login(broker, cluster, broker_username(space.vhost, user), password, features)
            for cluster, broker in (where.placed or (("", where.broker),)))
        # Read at every reconcile, so an operator's change of the plan reaches the routers at
        # the next resync without a config event.
        throttled, plan_policy = statements.throttle_and_plan_policy(space)
        desired, by_address = rc.desired_entities(space, addresses, users, logins, throttled,
                                                  plan_policy=plan_policy, features=features)
        router = where.router
        if router is not None and router.peers:  # a router of the space's own mesh
            desired.update(rc.mesh_connectors(space.vhost, router.peers))
        return addresses, desired, by_address

    def reconcile(self, space: AddressSpace) -> Report:
        # A standard space's AMQPS and MQTTS listeners are the router's and the gateway's:
        # its endpoints' certificates go where they read them, before anything else.
        try:
            certificates.publish(space)
        except certificates.CertificateError as exc:
            return Report(space_error=str(exc))
        where = endpoints.of(space)  # once: on Kubernetes it reads the space's infra
        if self.management is not None or len(where.routers) == 1:
            return self._reconcile_on(space, where)
        return self._on_each(space, where)

    def _reconcile_on(self, space: AddressSpace, where: endpoints.SpaceEndpoints) -> Report:
        """The space on `where`'s one router (or on this agent's own connection)."""
        return self._on_connection(
            where, lambda mgmt: _timed(mgmt, lambda: self._reconcile(space, where, mgmt)))

    def _on_each(self, space: AddressSpace, where: endpoints.SpaceEndpoints) -> Report:
        """The space on every router of its mesh, each brought to the same desired state, one
        after the other. A router that does not answer leaves the others configured (their
        clients keep working, new addresses included) and every address of the space in
        error until it has them too: retried like any address error, and restored by the
        router watch when it comes back empty. Unreachable all: transient, as one router."""
        reports, down = [], []
        for router in where.routers:
            try:
                reports.append((router, self._reconcile_on(space, where.on(router))))
            except TransientError as exc:
                down.append((router, exc))
        if not reports:
            raise down[0][1]
        return _merged(space, reports, down)

    def _on_connection(self, where: endpoints.SpaceEndpoints, work):
        """work(connection), on a kept connection if there is one; if that fails as
        unreachable (the router restarted, or closed it while idle), once more on a new one.
        A reconcile or teardown is a diff: repeating it is safe. `work` releases it."""
        mgmt = self._connect(where)
        if mgmt is not self.management and mgmt.pooled:
            try:
                return work(mgmt)
            except TransientError:
                mgmt = self._fresh(where)
        return work(mgmt)

    def _reconcile(self, space: AddressSpace, where, mgmt: Management) -> Report:
        prefix = rc.owner_prefix(space.vhost)
        refused: dict = {}
        broken = False
        try:
            report = self._incremental(space, where, mgmt)
            if report is not None:
                return report
            addresses, desired, by_address = self._desired(space, where, features(mgmt, space.vhost))
            applied.forget(mgmt, prefix)  # until this run has applied the policy whole
            actual = self._apply(mgmt, desired, prefix, refused)
            deadline = time.monotonic() + AUTOLINK_WAIT_SECONDS
            while time.monotonic() < deadline and self._inactive(actual):
                time.sleep(0.05)
                self._reread_status(mgmt, actual, prefix)
            # The TLS files of connectors the router no longer has (a secret changed).
            connectors.forget_files(space.vhost, {key[1] for key in desired
                                                  if key[0] == rc.SSL_PROFILE})
            policy = {key: desired[key] for key in _policy_keys(desired)}
            if all(key in actual and key not in refused
                   and not rc.differs(policy[key], actual[key]) for key in policy):
                applied.record(mgmt, prefix, policy)  # on this connection, before its release
        except ManagementError as exc:  # a QUERY or the schema: nothing could be compared
            return Report(space_error=f"Router refused the configuration: {exc}", checked=False)
        except RouterUnreachable as exc:
            broken = True
            raise TransientError(str(exc), soon=True) from exc
        finally:
            self._release(mgmt, broken)
        return self._verify(desired, by_address, actual, refused)

    def _apply(self, mgmt: Management, desired: dict, prefix: str, refused: dict) -> dict:
        if self.snapshot is not None:  # a restore's, of the router it restores
            try:
                actual = tables.current(mgmt, self.snapshot, prefix)
            except (ManagementError, touched.Unknown):
                actual = None
        else:  # a shared qdrouterd's stored tables or reads by name; None: its own QUERY
            actual = tables.owned(mgmt, prefix, wanted=desired)
        if actual is None:
            return apply(mgmt, desired, prefix, refused=refused)
        try:
            return apply(mgmt, desired, prefix, actual)
        except ManagementError:  # it holds what the rows did not tell: read it anew, by name
            again = None  # on a shared router, where the space's own QUERY reads it whole
            try:
                if tables.is_shared(mgmt.url):
                    again = tables.by_name(mgmt, prefix, desired)
            except (ManagementError, touched.Unknown):
                again = None
            return apply(mgmt, desired, prefix, again, refused=refused)

    def _incremental(self, space: AddressSpace, where, mgmt: Management) -> Report | None:
        """Only the new entities, when every event the agent has not applied creates an
        anycast or multicast address and its last reconcile left the space clean (no error,
        not invalidated by a router restart): the space's vhost policy is READ and compared,
        the new entities CREATEd, and their answers confirm them. None: a full reconcile is
        needed (it is also what every resync and drift check runs). So a small change costs
        what it changes, not what its space holds."""
        if self.snapshot is not None:
            return None
        events = pending_events(space.uid, self.kind)
        if not only_creates(events, ROUTER_ONLY_TYPES):
            return None
        state = agent_state(space.uid, self.kind)
        if (not state or not state.applied_sequence or state.address_errors
                or state.space_error or state.invalidated):
            return None
        names = [p["name"] for _, p in events]
        new = statements.addresses_named(space, names)
        _, desired, by_address = self._desired(space, where, features(mgmt, space.vhost), new)
        # The space's policy must be as desired already: a throttle, a user or a plan may have
        # changed it without an event this path would see (a wake-up with creates pending).
        # Unchanged since the last clean run (applied.py): not read again.
        prefix = rc.owner_prefix(space.vhost)
        policy = {key: desired.pop(key) for key in _policy_keys(desired)}
        if not applied.matches(mgmt, prefix, policy):
            rows = mgmt.read_many(policy)
            if any(row is None or rc.differs(policy[key], row)
                   for key, row in zip(policy, rows, strict=True)):
                return None
            applied.record(mgmt, prefix, policy)
        refused: dict = {}
        actual = apply(mgmt, desired, prefix, actual={}, refused=refused)
        if refused:
            return None  # a name taken (the router holds more than the agent knew): full diff
        return self._verify(desired, by_address, actual, checked=False)

    def _reread_status(self, mgmt: Management, actual: dict, prefix: str) -> None:
        """Only the autoLinks' status can still change: re-reads that alone, of the space's
        autoLinks (its QUERY), or on a shared qdrouterd, whose QUERY answers every space's, of
        the inactive ones by name."""
        if not tables.is_shared(mgmt.url):
            rows = mgmt.query(rc.AUTO_LINK, ["name", "operStatus"], name_prefix=prefix)
        else:
            rows = [r for r in mgmt.many(("READ", None, {"type": rc.AUTO_LINK, "name": key[1]})
                                         for key in sorted(self._inactive(actual)))
                    if isinstance(r, dict)]
        for row in rows:
            if (rc.AUTO_LINK, row.get("name")) in actual:
                actual[(rc.AUTO_LINK, row["name"])]["operStatus"] = row.get("operStatus")

    @staticmethod
    def _inactive(actual: dict) -> set:
        return {key for key, row in actual.items()
                if key[0] == rc.AUTO_LINK and row.get("operStatus") != "active"
                and not rc.is_usage_hold(key[1])}

    def _verify(self, desired, by_address, actual, refused=None, checked=True) -> Report:
        refused = refused or {}
        missing = {k for k in desired if k not in actual or rc.differs(desired[k], actual[k])}
        inactive = self._inactive(actual)
        errors = {}
        for name, keys in by_address.items():
            said = [_refusal(k, refused[k]) for k in keys if k in refused]
            if said:
                errors[name] = {"message": "; ".join(said), "permanent": False}
            elif missing & set(keys):
                errors[name] = {"message": "Router configuration not yet verified",
                                "permanent": False}
            elif inactive & set(keys):
                errors[name] = {"message": "Router autoLink to the broker is not active",
                                "permanent": False}
        space_keys = [k for k in desired if rc.is_space_wide(k)]
        said = [_refusal(k, refused[k]) for k in space_keys if k in refused]
        space_missing = [k for k in space_keys if k in missing]
        space_error = ("; ".join(said) if said
                       else "Router policy not yet verified" if space_missing else "")
        return Report(address_errors=errors, space_error=space_error, checked=checked)

    def teardown(self, space: AddressSpace) -> None:
        certificates.withdraw(space)
        where = endpoints.of(space)
        for router in where.routers:  # each; one unreachable: retried, the others done again
            self._on_connection(where.on(router), lambda mgmt: self._teardown(space, mgmt))

    def _teardown(self, space: AddressSpace, mgmt: Management) -> None:
        broken = False
        prefix = rc.owner_prefix(space.vhost)
        try:
            # A shared qdrouterd's stored tables tell what to delete (a DELETE of what is gone
            # already is answered 404, which is what was wanted); else the space's own QUERY.
            applied.forget(mgmt, prefix)
            apply(mgmt, {}, prefix, tables.owned(mgmt, prefix))
            connectors.forget_files(space.vhost)
        except RouterUnreachable as exc:
            broken = True
            raise TransientError(str(exc), soon=True) from exc
        finally:
            self._release(mgmt, broken)


def _merged(space: AddressSpace, reports: list, down: list) -> Report:
    """One report of the space's routers: an address is in error if it is on any of them,
    the space if its policy is; each message names its router. A router that did not answer
    puts every address in error (not permanent: retried until it has them)."""
    merged = Report(checked=not down and all(r.checked for _, r in reports))
    said = []
    for router, report in reports:
        for name, error in report.address_errors.items():
            merged.address_errors.setdefault(
                name, {**error, "message": f"{router.name}: {error['message']}"})
        if report.space_error:
            said.append(f"{router.name}: {report.space_error}")
        for kind, ms in report.timings.items():
            merged.timings[kind] = merged.timings.get(kind, 0) + ms
    if down:
        unreachable = "; ".join(f"Router {router.name} did not answer ({exc})"
                                for router, exc in down)
        said.append(unreachable)
        for name in Address.objects.filter(space=space, scheduled=True).values_list(
                "name", flat=True):
            merged.address_errors.setdefault(name, {"message": unreachable, "permanent": False})
    merged.space_error = "; ".join(said)
    return merged


def _refusal(key: tuple, exc: ManagementError) -> str:
    """What a tenant reads in the status when the router refused one of its entities."""
    etype = key[0].rsplit(".", 1)[-1]
    return f"Router refused {etype} {key[1]}: {exc.status} {exc.description}"
