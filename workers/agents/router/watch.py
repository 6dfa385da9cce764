"""The router watch: notices a router that came back empty and restores every space it serves
(on one machine: the one router, or each router of the mesh).

qdrouterd keeps what management created in memory, so a restarted qdrouterd locks every
messaging user out until the router agent runs again; so does an embedded router without its
state directory (with one, its configuration journal brings everything back, the marker too,
and the watch has nothing to do). One tick (`tick`, run by Celery beat every
MAAS_ROUTER_WATCH_INTERVAL)

1. reads, over one management connection, the router's `uptimeSeconds` (entity type
   `org.apache.qpid.dispatch.router`) and a marker entity the watch left there, a
   `router.config.address` named `maas-watch` whose prefix carries the token of the run
   recorded in `RouterIncarnation` (both exist in qdrouterd 1.19 and the embedded router). The
   marker missing or another token means a new run: an empty router (a paused router's uptime
   falls behind the clock, so uptime alone cannot tell);
2. if so, invalidates the router agent's state of every space in one UPDATE: the API shows
   them Configuring ("Router restarted; configuration being restored"), not Active; then it
   leaves a new marker;
3. restores every invalidated space with the router agent (workers.agents.runner.run, the same
   idempotent reconcile as a change: addresses, autoLinks, link routes, the vhost policy and the
   users), several at a time, in the watch itself: restores do not wait behind the change
   queue, and changes do not wait behind them. Spaces whose clients try to log in meanwhile go
   first: the auth service refuses those logins as a transient failure (sasl sys-temp, the MQTT
   gateway's CONNACK 3) and asks for them (`ask_first`).

The invalidated rows are the work list: a watch killed mid-restore carries on at its next tick,
and the resync queues them once no watch has read a router for a resync interval. A router
that did not restart costs two reads and one UPDATE of one row per tick, and no reconcile.
"""
import logging
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import redis
from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from config_service.models import AddressSpace, AgentState, RouterIncarnation
from config_service.routers import meshed
from workers import dispatch, endpoints
from workers.agents import runner
from workers.agents.router import desired as rc
from workers.agents.router import tables, touched
from workers.agents.router.agent import RouterAgent, management_client
from workers.clients.qdr import Management, ManagementError, RouterUnreachable

logger = logging.getLogger(__name__)

KIND = "router"
RESTORING = "Router restarted; configuration being restored"
MARKER = rc.WATCH_MARKER
MARKER_PREFIX = "$maas-watch/"
# uptimeSeconds counts whole seconds and the reading takes a round trip, so the start time
# (now - uptime) of one run of the router wobbles by about a second between readings.
START_TOLERANCE = timedelta(seconds=2)
# vhost -> when a client of it first tried to log in while it was being restored (Redis)
WANTED_KEY = "maas:router:restore-first"
WANTED_TTL = 600  # seconds: asks of a restore that ended without the watch are forgotten


@dataclass
class Tick:
    """What one tick saw and did."""

    reachable: bool = False
    restarted: bool = False
    invalidated: int = 0  # router states newly marked not applied
    restored: int = 0  # spaces reconfigured
    failed: int = 0  # spaces left for the next tick (router unreachable again)


def tick(*urls: str) -> Tick:
    """Checks the routers at `urls` (one, or each of a mesh) for a restart, then restores
    whatever is invalidated: on one router, or on every router of the mesh (`_restore_from`)."""
    result = Tick()
    for url in urls:
        seen = detect(url)
        if seen is not None:  # else the router is down: a restore onto it would only fail
            result.reachable = True
            result.restarted |= seen[0]
            result.invalidated += seen[1]
    if result.reachable:
        result.restored, result.failed = restore()
    return result


def detect(url: str) -> tuple[bool, int] | None:
    """Reads the router's run and records it: (restarted, router states invalidated), or None
    if the router cannot be read."""
    key = public_url(url)
    try:
        mgmt = Management(url, settings.MAAS_ROUTER_ADMIN_USER,
                          settings.MAAS_ROUTER_ADMIN_PASSWORD, timeout=5.0,
                          ca=endpoints.management_ca(url))
    except RouterUnreachable:
        logger.info("router.unreachable", extra={"router": key})
        return None
    try:
        read_at = timezone.now()
        uptime = mgmt.uptime_seconds()
        marker = mgmt.read(rc.ADDRESS, MARKER)
        token = str(marker.get("prefix") or "").removeprefix(MARKER_PREFIX) if marker else None
        restarted, invalidated, keep = check(key, uptime, token, read_at)
        if keep != token:  # only now that the invalidation is committed
            if marker is not None:
                mgmt.delete(rc.ADDRESS, MARKER)
            mgmt.create(rc.ADDRESS, MARKER, {"prefix": MARKER_PREFIX + keep})
        return restarted, invalidated
    except RouterUnreachable:
        logger.info("router.unreachable", extra={"router": key})
        return None
    except ManagementError as exc:  # e.g. a router without uptimeSeconds: only resync repairs
        logger.warning("router.watch_failed", extra={"router": key, "error": str(exc)})
        return None
    finally:
        mgmt.close()


def check(key: str, uptime: int, token: str | None, read_at) -> tuple[bool, int, str]:
    """Records the run of the router `key` from what was read at `read_at`: its uptime and the
    token of the marker found on it; (restarted, states invalidated, token it must carry)."""
    started = read_at - timedelta(seconds=uptime)
    with transaction.atomic():
        seen = RouterIncarnation.objects.select_for_update().filter(management_url=key).first()
        if seen is not None and seen.checked_at >= read_at:
            return False, 0, seen.token  # another watcher recorded a newer reading meanwhile
        if seen is None:
            # First sight (a new platform, or a new watch): a state applied before this run
            # of the router started was applied to an earlier one.
            seen = RouterIncarnation.objects.create(
                management_url=key, token=secrets.token_hex(8), started_at=started,
                uptime_seconds=uptime, checked_at=read_at)
            return False, _invalidate(applied_before=started - START_TOLERANCE), seen.token
        # The marker decides: a router keeps it for as long as it runs, and only a watch that
        # recorded a new run leaves another. Uptime alone would be wrong: a router paused
        # (SIGSTOP, a frozen VM) reports less uptime than the wall clock advanced.
        restarted = token != seen.token
        if not restarted and started > seen.started_at + START_TOLERANCE:
            # A new run that kept its configuration (the embedded router's journal brought the
            # marker back with the rest), or a router that was paused: nothing to restore.
            logger.info("router.configuration_kept", extra={
                "router": key, "uptime": uptime, "seconds_behind":
                (started - seen.started_at).total_seconds()})
            seen.started_at = started
        invalidated = 0
        if restarted:
            # Everything applied so far may have gone to the old run, even by a reconcile still
            # running (it started before invalidated_at, so its outcome does not clear it); one
            # that spanned the restart lost its connection and recorded nothing.
            invalidated = _invalidate()
            logger.warning("router.restarted", extra={
                "router": key, "uptime": uptime, "previous_uptime": seen.uptime_seconds,
                "marker_found": token is not None, "spaces": invalidated})
            seen.token, seen.started_at = secrets.token_hex(8), started
            seen.restarts += 1
        seen.uptime_seconds, seen.checked_at = uptime, read_at
        seen.save(update_fields=["token", "started_at", "restarts", "uptime_seconds",
                                 "checked_at"])
    return restarted, invalidated, seen.token


def _invalidate(*, applied_before=None) -> int:
    """Marks the router agent's state of every space (applied before then) as not applied."""
    # One router (or one mesh) serves every standard space here (config_service.routers); on
    # Kubernetes each space has its own and the watch does not run (workers.tasks.watch_router).
    states = AgentState.objects.filter(kind=KIND, torn_down=False)
    if applied_before is not None:
        states = states.filter(applied_at__lt=applied_before)
    return runner.invalidate(KIND, states, RESTORING)


def _vhosts(uids) -> dict:
    """{vhost: uid} of the spaces among `uids` (a list or a subquery)."""
    return {f"{slug}.{name}": uid for slug, name, uid in AddressSpace.objects.filter(
        uid__in=uids).values_list("tenant__slug", "name", "uid")}


def restoring_vhosts() -> frozenset[str]:
    """The vhosts of the spaces whose router configuration is being restored."""
    return frozenset(_vhosts(AgentState.objects.filter(kind=KIND).exclude(
        invalidated="").values("space_uid")))


def ask_first(vhosts) -> None:
    """Clients of these spaces are trying to log in: restore them before the others (the auth
    service calls this; the restore reads it before taking each space)."""
    client = dispatch._redis()
    now = timezone.now().timestamp()
    pipe = client.pipeline()
    pipe.zadd(WANTED_KEY, {vhost: now for vhost in vhosts}, nx=True)
    pipe.expire(WANTED_KEY, WANTED_TTL)
    pipe.execute()


class Work:
    """The spaces left to restore: those whose clients asked first (in the order they asked),
    then the others, oldest applied first. Asked anew before each space is taken, so a client
    that comes during a long restore is served next."""

    def __init__(self, spaces: list):
        self._left = dict.fromkeys(spaces)
        self._uids = _vhosts(spaces)
        self._lock = threading.Lock()

    def take(self):
        try:
            asked = [v.decode() for v in dispatch._redis().zrange(WANTED_KEY, 0, -1)]
        except redis.RedisError:
            asked = []  # the order is a courtesy: restoring goes on without it
        with self._lock:
            for vhost in asked:
                uid = self._uids.get(vhost)
                if uid in self._left:
                    del self._left[uid]
                    return uid
            if not self._left:
                return None
            uid = next(iter(self._left))
            del self._left[uid]
            return uid


def restore() -> tuple[int, int]:
    """Reconciles every space whose router state is invalidated; (restored, left for later)."""
    if settings.MAAS_AGENT_MODE == "process":
        return 0, 0
    spaces = runner.invalidated_spaces(KIND)
    if not spaces:
        return 0, 0
    started = timezone.now()
    work = Work(spaces)
    workers = max(1, min(settings.MAAS_ROUTER_RESTORE_CONCURRENCY, len(spaces)))
    with ThreadPoolExecutor(workers, thread_name_prefix="router-restore") as pool:
        restored = sum(pool.map(_restore_from, [work] * workers))
    try:
        dispatch._redis().delete(WANTED_KEY)  # served; whoever is still waiting asks again
    except redis.RedisError:
        pass
    logger.info("router.restored", extra={
        "spaces": restored, "left": len(spaces) - restored,
        "seconds": round((timezone.now() - started).total_seconds(), 3)})
    return restored, len(spaces) - restored


def _restore_from(work: Work) -> int:
    """Restores spaces taken from `work` until it is empty, over one management connection
    (opening one costs about as much as restoring a small space)."""
    close_old_connections()
    restored, mgmt, snapshot = 0, None, None
    try:
        while True:
            space_uid = work.take()
            if space_uid is None:
                return restored
            try:
                if meshed():
                    # Every router of the mesh, each from its own reads: the states are the
                    # space's, so one router's restore must not mark the others restored.
                    runner.run(space_uid, KIND, RouterAgent())
                    restored += 1
                    continue
                if mgmt is None:
                    mgmt = management_client()
                    # One read of the router for the whole restore, not two per space: each
                    # space's reconcile would otherwise QUERY every space's entities.
                    try:
                        snapshot = tables.read(mgmt)
                    except touched.Unknown:  # unvouched: each space reads its own
                        snapshot = None
                runner.run(space_uid, KIND, RouterAgent(management=mgmt, snapshot=snapshot))
                restored += 1
            except (runner.TransientError, RouterUnreachable) as exc:
                # The router went away again: the next tick retries what is left.
                logger.info("router.restore_deferred", extra={"space": str(space_uid),
                                                               "error": str(exc)})
                if mgmt is not None:
                    mgmt.close()
                mgmt = None
            except Exception:  # one bad space must not stop the others; the next tick retries
                logger.exception("router.restore_failed", extra={"space": str(space_uid)})
    finally:
        if mgmt is not None:
            mgmt.close()
        connection.close()  # each pool thread has a database connection of its own


def alive(now) -> bool:
    """Whether a watch read a router lately (a restore may keep a tick busy a while)."""
    window = max(settings.MAAS_RESYNC_INTERVAL, 10 * settings.MAAS_ROUTER_WATCH_INTERVAL)
    return RouterIncarnation.objects.filter(
        checked_at__gte=now - timedelta(seconds=window)).exists()


def public_url(url: str) -> str:
    """The URL without credentials, as recorded and logged."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
