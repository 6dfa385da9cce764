"""manage.py runplatform: the whole platform on one machine, in the foreground.

Starts the web server (127.0.0.1:8000), a Celery worker running the agents on changes, a second
one for resync and usage work, a third for the router watch, Celery beat (outbox relay, resync,
router watch, usage sampling), the embedded AMQP 1.0 router (AMQP 5673, AMQPS 5674, management
5675) -- or, when `QDROUTERD` names a qdrouterd binary, that qdrouterd on the same ports and the
vhost relay between it and RabbitMQ (127.0.0.1:5677) --, the auth service routers delegate SASL
to (127.0.0.1:5676; with the router enabled), the MQTT gateway of standard spaces (MQTT 1885,
MQTTS 8885) and the processes listed in MAAS_EXTRA_PROCESSES;
starts again, after a growing back-off, any of them that exits (maas.supervisor), and stops them
all on Ctrl-C.
"""
import os
import signal
import sys
import time
from urllib.parse import urlparse

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from config_service import routers
from config_service.brokers import internal_ca
from dataplane import qdrouterd
from maas.supervisor import Supervisor
from workers import endpoints

# Nothing here reads Celery's worker events or needs workers to know of each other: without
# them a worker neither sends a heartbeat event every 2 s nor reads every other worker's.
QUIET = ["--without-gossip", "--without-mingle", "--without-heartbeat"]


# Lower CPU priorities (maas.supervisor): {process: niceness}.
NICE = {"background-worker": 10}


def processes(bind: str) -> dict[str, list[str]]:
    py = sys.executable
    procs = {
        "web": [py, "-m", "gunicorn", "maas.wsgi", "--bind", bind, "--workers",
                str(settings.MAAS_WEB_WORKERS), "--access-logfile", "-"],
        "worker": [py, "-m", "celery", "-A", "maas", "worker", "--loglevel", "INFO",
                   "--concurrency", str(settings.MAAS_WORKER_CONCURRENCY), "-Q",
                   settings.CELERY_TASK_DEFAULT_QUEUE, "-n", "agents@%h", *QUIET],
        # Resync, usage sampling and the usage job: never in the way of a change, in its own
        # queue and at a lower CPU priority (NICE: on one machine, a full resync of every
        # space would otherwise take the cores from the changes that arrive meanwhile).
        "background-worker": [py, "-m", "celery", "-A", "maas", "worker", "--loglevel", "INFO",
                              "--concurrency", "2", "-Q",
                              f"{settings.MAAS_RESYNC_QUEUE},{settings.MAAS_USAGE_QUEUE}",
                              "-n", "background@%h", *QUIET],
        # The router watch: one tick at a time, nothing else in its way (workers.tasks).
        "watch-worker": [py, "-m", "celery", "-A", "maas", "worker", "--loglevel", "INFO",
                         "--concurrency", "1", "-Q", settings.MAAS_WATCH_QUEUE,
                         "-n", "watch@%h", *QUIET],
        "beat": [py, "-m", "celery", "-A", "maas", "beat", "--loglevel", "INFO",
                 "--schedule", str(settings.BASE_DIR / "var" / "celerybeat-schedule")],
    }
    if settings.MAAS_ROUTER_ENABLED and settings.MAAS_RUN_EMBEDDED_ROUTER:
        from workers.agents.router.certificates import ensure_self_signed

        ensure_self_signed(settings.MAAS_ROUTER_TLS_CERT, settings.MAAS_ROUTER_TLS_KEY,
                           settings.MAAS_PUBLIC_HOST)
        mgmt = urlparse(settings.MAAS_ROUTER_MANAGEMENT_URL)
        if qdrouterd.binary():
            mesh = routers.local_routers()
            for k, router in enumerate(mesh, 1):
                procs["router" if k == 1 else f"router-{k}"] = qdrouterd_command(router, mesh)
        elif routers.meshed():
            raise CommandError("MAAS_ROUTER_MESH > 1 needs qdrouterd (QDROUTERD): the embedded "
                               "router is not meshed")
        else:
            procs["router"] = embedded_router_command(mgmt)
    if settings.MAAS_ROUTER_ENABLED:
        procs["authservice"] = [
            py, str(settings.BASE_DIR / "manage.py"), "run_authservice",
            "--host", settings.MAAS_AUTH_SERVICE_HOST,
            "--port", str(settings.MAAS_AUTH_SERVICE_PORT),
        ]
        if _auth_service_tls():
            # The routers check this identity: whatever else answers on the port gets no login.
            from workers.agents.router.certificates import ensure_self_signed

            ensure_self_signed(settings.MAAS_AUTH_SERVICE_TLS_CERT,
                               settings.MAAS_AUTH_SERVICE_TLS_KEY, settings.MAAS_AUTH_SERVICE_HOST)
            procs["authservice"] += ["--tls-cert", settings.MAAS_AUTH_SERVICE_TLS_CERT,
                                     "--tls-key", settings.MAAS_AUTH_SERVICE_TLS_KEY]
    if settings.MAAS_ROUTER_ENABLED and settings.MAAS_MQTT_GATEWAY_ENABLED:
        # MQTT for standard spaces: an AMQP client of whichever router runs (docs/mqtt.md).
        procs["mqtt-gateway"] = [py, str(settings.BASE_DIR / "manage.py"), "run_mqtt_gateway"]
    if settings.MAAS_ROUTER_ENABLED:
        # qdrouterd opens RabbitMQ connections with its connector's host as the AMQP hostname,
        # so they land in vhost `/`; the relay sets `vhost:<vhost>` from the login. A cluster's
        # relay also takes every router to another node when one is gone (the embedded
        # router's connectors go through it then). One relay per broker of the pool
        # (workers.endpoints.broker_pool) that needs one.
        for broker in endpoints.broker_pool():
            if qdrouterd.binary() or broker.cluster:
                procs["-".join(filter(None, ("vhost-relay", broker.name)))] = [
                    py, "-m", "dataplane.vhost_relay",
                    *router_facing_args(settings.MAAS_VHOST_RELAY_HOST, broker.relay_port, broker,
                                        tls=not qdrouterd.binary()),
                    *relay_to_broker_args(broker, "amqp"),
                ]
    # Brokered spaces' MQTT: RabbitMQ's listener behind the relay that scopes client ids to
    # their vhost (RabbitMQ 3.10 tracks them across vhosts; docs/storage.md); their AMQP:
    # the relay that takes the space from the login and the address names bare. Both serve
    # TLS with the platform's certificate, and reach RabbitMQ over TLS where it has it.
    for broker in endpoints.broker_pool():
        host = settings.MAAS_MQTT_RELAY_HOST
        procs["-".join(filter(None, ("mqtt-relay", broker.name)))] = [
            py, "-m", "dataplane.vhost_relay", "--protocol", "mqtt",
            "--listen", f"{host}:{broker.mqtt_port}", *relay_to_broker_args(broker, "mqtt"),
            *_relay_tls(host, broker.mqtts_port),
        ]
        if broker.tenant_amqp_port:
            procs["-".join(filter(None, ("amqp-relay", broker.name)))] = [
                py, "-m", "dataplane.vhost_relay", "--protocol", "brokered-amqp",
                "--listen", f"{host}:{broker.tenant_amqp_port}", *relay_to_broker_args(broker, "amqp"),
                "--api-url", broker.api_url, *_relay_tls(host, broker.tenant_amqps_port),
            ]
    procs.update(settings.MAAS_EXTRA_PROCESSES)
    return procs


def relay_to_broker_args(broker, protocol: str) -> list[str]:
    """A relay's broker, its `protocol` listener ("amqp" or "mqtt"), and a cluster's other
    nodes: their TLS listeners, checked against the internal CA, where the broker has them."""
    ca = broker.broker_ca
    if protocol == "amqp":
        port, which = (broker.amqps_port, 2) if ca else (broker.amqp_port, 0)
    else:
        port, which = (broker.broker_mqtts_port, 3) if ca else (broker.broker_mqtt_port, 1)
    args = ["--broker", f"{broker.amqp_host}:{port}"]
    for ports in broker.more_nodes:
        args += ["--more-broker", f"{broker.amqp_host}:{ports[which]}"]
    return args + (["--broker-ca", ca] if ca else [])


def router_facing_args(host: str, port: int, broker, tls: bool = True) -> list[str]:
    """The vhost relay's listener for the routers: TLS only, with a certificate of the
    internal CA, when the broker is reached over TLS (the routers' logins cross it) and the
    router is the embedded one; else plain. qdrouterd 1.19's connectors stay plain to it: one
    whose TLS connection ended in error after the agent deleted it crashed the router
    (docs/security.md, "Internal links")."""
    if not (tls and broker.broker_ca):
        return ["--listen", f"{host}:{port}"]
    from workers.agents.router.certificates import ensure_internal_certificates

    _, cert, key = ensure_internal_certificates(
        settings.MAAS_INTERNAL_TLS_DIR, ["vhost-relay"], host)["vhost-relay"]
    return ["--listen", "none", "--tls-listen", f"{host}:{port}", "--tls-cert", cert,
            "--tls-key", key]


def _relay_tls(host: str, port: int) -> list[str]:
    """A relay's TLS listener on `port` (none for 0), with the platform's certificate."""
    if not port:
        return []
    from workers.agents.router.certificates import ensure_self_signed

    ensure_self_signed(settings.MAAS_ROUTER_TLS_CERT, settings.MAAS_ROUTER_TLS_KEY,
                       settings.MAAS_PUBLIC_HOST)
    return ["--tls-listen", f"{host}:{port}", "--tls-cert", settings.MAAS_ROUTER_TLS_CERT,
            "--tls-key", settings.MAAS_ROUTER_TLS_KEY,
            "--space-tls-dir", settings.MAAS_SPACE_TLS_DIR]


def qdrouterd_command(router: routers.LocalRouter, mesh: list[routers.LocalRouter]) -> list[str]:
    """qdrouterd (`QDROUTERD`) as `router` of the `mesh` (config_service.routers: one router
    on the embedded router's settings, or each of a mesh), its configuration written to
    var/qdrouterd.json (router k of a mesh: var/qdrouterd-<k>.json) at each start. Router k
    connects to routers 1..k-1, so each pair of the mesh is linked once."""
    mgmt = urlparse(router.management_url)
    index = mesh.index(router)
    tls = None
    if router.inter_router_port:
        from workers.agents.router.certificates import ensure_internal_certificates

        ca, cert, key = ensure_internal_certificates(
            settings.MAAS_INTERNAL_TLS_DIR, [r.id for r in mesh], router.host)[router.id]
        tls = qdrouterd.MeshTls(ca, cert, key)
    where = qdrouterd.Listeners(
        host=router.host, amqp_port=router.amqp_port,
        amqps_port=router.amqps_port, tls_cert=settings.MAAS_ROUTER_TLS_CERT,
        tls_key=settings.MAAS_ROUTER_TLS_KEY, management_host=mgmt.hostname or "127.0.0.1",
        management_port=mgmt.port or 5675, admin_user=settings.MAAS_ROUTER_ADMIN_USER,
        auth_host=settings.MAAS_AUTH_SERVICE_HOST, auth_port=settings.MAAS_AUTH_SERVICE_PORT,
        metrics_host=settings.MAAS_ROUTER_METRICS_HOST, metrics_port=router.metrics_port,
        handshake_timeout=settings.MAAS_HANDSHAKE_TIMEOUT, auth_ca=_auth_service_ca(),
        management_tls=mgmt.scheme == "amqps",
        mode="interior" if tls else "standalone",
        inter_router_port=router.inter_router_port or None, mesh_tls=tls,
        peers=tuple((p.host, p.inter_router_port) for p in mesh[:index]) if tls else ())
    name = "qdrouterd.json" if index == 0 else f"qdrouterd-{index + 1}.json"
    path = qdrouterd.write_config(settings.BASE_DIR / "var" / name, router.id, where)
    return qdrouterd.command(path)


def _auth_service_tls() -> bool:
    """Whether the auth service serves TLS and the router checks its certificate:
    MAAS_AUTH_SERVICE_TLS, whose `auto` is on when this process starts the embedded router, off
    with qdrouterd (maas/settings.py says why) or a router started elsewhere (it would need the
    CA: `true` asks for TLS whatever the router)."""
    choice = str(settings.MAAS_AUTH_SERVICE_TLS).lower()
    if not settings.MAAS_AUTH_SERVICE_TLS_CERT or choice in ("false", "0", "no", "off"):
        return False
    if choice != "auto":
        return True
    return bool(settings.MAAS_RUN_EMBEDDED_ROUTER) and qdrouterd.binary() is None


def _auth_service_ca() -> str | None:
    """The CA the routers check the auth service against, or None (plain)."""
    return settings.MAAS_AUTH_SERVICE_CA if _auth_service_tls() else None


def embedded_router_command(mgmt) -> list[str]:
    py = sys.executable
    ca, broker_ca = _auth_service_ca(), internal_ca()
    return [
        py, "-m", "dataplane.router", "--host", settings.MAAS_ROUTER_HOST,
        "--amqp-port", str(settings.MAAS_ROUTER_AMQP_PORT),
        "--amqps-port", str(settings.MAAS_ROUTER_AMQPS_PORT),
        "--tls-cert", settings.MAAS_ROUTER_TLS_CERT, "--tls-key", settings.MAAS_ROUTER_TLS_KEY,
        # Spaces' own certificates, by SNI host (spec.endpoints; workers/certificates.py).
        "--space-tls-dir", settings.MAAS_SPACE_TLS_DIR,
        "--management-host", mgmt.hostname or "127.0.0.1",
        "--management-port", str(mgmt.port or 5675),
        # amqps://: the agents check the platform's certificate there (workers/endpoints.py)
        *(["--management-tls"] if mgmt.scheme == "amqps" else []),
        "--admin-user", settings.MAAS_ROUTER_ADMIN_USER,
        # Every listener relays SASL to the auth service started beside it (processes()).
        "--auth-service", f"{settings.MAAS_AUTH_SERVICE_HOST}:{settings.MAAS_AUTH_SERVICE_PORT}",
        "--metrics-host", settings.MAAS_ROUTER_METRICS_HOST,
        "--metrics-port", str(settings.MAAS_ROUTER_METRICS_PORT),
        # Its usage counters and configuration journal, read back at each start.
        "--state-dir", settings.MAAS_ROUTER_STATE_DIR,
        *(["--auth-service-ca", ca] if ca else []),
        # The brokers' TLS listeners' CA: the sslProfile the agent's connectors name.
        *(["--broker-ca", broker_ca] if broker_ca else []),
    ]


class Command(BaseCommand):
    help = "Run web, Celery worker and beat (and the agents) in the foreground."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default=os.environ.get("MAAS_BIND", "127.0.0.1:8000"))

    def handle(self, bind, **options):
        (settings.BASE_DIR / "var").mkdir(exist_ok=True)
        # The auth service checks the router admin's password: it gets the one this process
        # settled on (environment or var/secrets), through the environment, not `ps`.
        state = settings.BASE_DIR / "var" / "processes.json"  # /readyz reads it (maas.health)
        # The brokered-amqp relays read the brokers' management API as the control plane does.
        env = dict(os.environ, MAAS_ROUTER_ADMIN_PASSWORD=settings.MAAS_ROUTER_ADMIN_PASSWORD,
                   MAAS_PROCESS_STATE_FILE=str(state), RABBITMQ_API_USER=settings.RABBITMQ_API_USER,
                   RABBITMQ_API_PASSWORD=settings.RABBITMQ_API_PASSWORD)
        supervisor = Supervisor(processes(bind), env=env, nice=NICE, state_file=state,
                                log=lambda line: self.stderr.write(line))
        supervisor.start()
        self.stdout.write(f"MaaS is up: http://{bind}/api/docs/ (admin at /admin/); Ctrl-C stops")
        stop = {"now": False}

        def on_signal(signum, frame):
            stop["now"] = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        # Each process has a session of its own (maas.supervisor): a closed terminal's hangup
        # reaches this one alone, which stops them all.
        signal.signal(signal.SIGHUP, on_signal)
        try:
            while not stop["now"]:
                supervisor.tick()
                time.sleep(0.5)
        finally:
            supervisor.stop()
