"""What several benchmarks set up and tear down alike: a migrated database of their own, kept
vacuumed where the server does not, and their Celery queues in Redis afterwards; what they
leave on this machine (`Leftovers`: their database, its spaces' RabbitMQ vhosts and users, the
extra RabbitMQ nodes they started), deleted when they end; a process's CPU time, and every
process's, summed by what it is; the time a process's threads ran and waited for a core."""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The process's own CPU time so far (utime + stime; not its children's)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def pids_of(label: str) -> list[int]:
    """The processes `_label` names `label` now (e.g. "web": gunicorn's master and workers)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace").split("\0")[:-1]
        except OSError:
            continue
        if cmd and _label(pid, cmd) == label:
            found.append(int(pid))
    return found


def schedstat(pids: list[int]) -> tuple[float, float]:
    """(seconds on a core, seconds runnable but waiting for one) so far, summed over every
    thread of `pids` (/proc/<pid>/task/*/schedstat): the second is what a busy machine adds."""
    on, waiting = 0, 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    ran, waited, _ = f.read().split()
            except (OSError, ValueError):
                continue
            on, waiting = on + int(ran), waiting + int(waited)
    return on / 1e9, waiting / 1e9


def _label(pid: str, cmd: list[str]) -> str:
    """What a process is, for `cpu_by_label`: PostgreSQL's backends as one, each RabbitMQ node
    by its name, each Celery worker by its queues, the web's processes as one."""
    text = " ".join(cmd)
    if text.startswith("postgres"):
        return "postgres"
    if "beam.smp" in text:
        try:  # rabbitmq-server names its node in the environment, not on the command line
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            return "rabbitmq " + env.get(b"RABBITMQ_NODENAME", b"rabbit").decode()
        except OSError:
            return "rabbitmq"
    if "gunicorn" in text:
        return "web"
    if "celery" in text and "worker" in cmd:
        return "celery -Q " + (cmd[cmd.index("-Q") + 1] if "-Q" in cmd[:-1] else "?")
    for word in ("beat", "dataplane.router", "qdrouterd", "run_authservice", "mqtt_gateway",
                 "vhost_relay", "redis-server", "java", "runplatform", "bench_"):
        if word in text:
            return word
    return os.path.basename(cmd[0]) if cmd else "?"


def load() -> str:
    """The machine's load average, for a figure's line."""
    return "load avg " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_by_label() -> dict[str, float]:
    """CPU seconds so far of every process on the machine, summed by `_label`: two of these
    taken around a measurement say what else had the cores meanwhile."""
    out: dict[str, float] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace").split("\0")[:-1]
            seconds = cpu_seconds(int(pid))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or a kernel thread
        if cmd:
            label = _label(pid, cmd)
            out[label] = out.get(label, 0.0) + seconds
    return out


def cpu_spent(before: dict[str, float], top: int = 8) -> str:
    """The `top` biggest CPU consumers since `before` (a `cpu_by_label`), as one line."""
    after = cpu_by_label()
    spent = sorted(((after[k] - before.get(k, 0.0), k) for k in after), reverse=True)
    return ", ".join(f"{label} {seconds:.1f} s" for seconds, label in spent[:top]
                     if seconds >= 0.05)


POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"  # the local server's admin database


def ensure_database(name: str) -> str:
    """The URL of database `name` on the local PostgreSQL, created and migrated if need be."""
    return _ensure_database(name)[0]


def _ensure_database(name: str) -> tuple[str, bool]:
    """(`ensure_database`'s URL, whether this call created the database)."""
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        created = not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                   (name,)).fetchone()
        if created:
            conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgres://postgres@127.0.0.1:5432/{name}"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                   env=dict(os.environ, DATABASE_URL=url))
    return url, created


NODES_SCRIPT = os.path.join(ROOT, "deploy", "local", "rabbitmq-nodes.sh")
# --keep of the benches that delete what they made (`Leftovers.clean_up`)
KEEP_HELP = "leave the database, vhosts, users and started RabbitMQ nodes for a later look"


def running_nodes() -> set[str]:
    """The names of the Erlang nodes running on this machine (`epmd -names`): rabbit, maas1..."""
    out = subprocess.run(["epmd", "-names"], capture_output=True, text=True).stdout
    return {line.split()[1] for line in out.splitlines() if line.startswith("name ")}


class Leftovers:
    """What a bench made on this machine, deleted by `clean_up` when it ends: the database it
    created (`ensure_database`), the RabbitMQ vhosts and MaaS's users of that database's
    address spaces, and the extra RabbitMQ nodes it started (`start_nodes`). Only what it
    recorded: a bench that measures a platform it did not start records nothing.

    `spaces=False`: the database's spaces are rows alone (bulk-inserted), with nothing on a
    broker to tear down."""

    def __init__(self, spaces: bool = True):
        self.since = time.time()  # a vhost made before is not this run's: never deleted
        self.url: str | None = None  # the database the bench's spaces are in
        self.created: str | None = None  # its name, when the bench created it
        self.spaces = spaces
        self.brokers = 0  # --brokers N
        self.started: list[int] = []  # k of the nodes maas<k> the bench started
        self.router_state: str | None = None  # the embedded router's journal directory

    def ensure_database(self, name: str) -> str:
        """`ensure_database`, noting the database (and whether it is new) for `clean_up`; and
        an embedded router journal of its own for the platform the bench starts
        (`MAAS_ROUTER_STATE_DIR`, inherited): var/router-state holds the spaces of whichever
        database wrote it last, and a run on the same space names restored the previous run's
        broker connectors with their old credentials (they failed for good)."""
        self.url, created = _ensure_database(name)
        self.created = name if created else None
        self.router_state = tempfile.mkdtemp(prefix=f"{name}-router-state-")
        os.environ["MAAS_ROUTER_STATE_DIR"] = self.router_state
        return self.url

    def start_nodes(self, brokers: int) -> None:
        """Nodes maas1..maas<brokers-1> running (deploy/local/rabbitmq-nodes.sh start), noting
        which of them this bench started: `clean_up` resets those, never one running before."""
        before = running_nodes()
        self.brokers = brokers
        self.started = [k for k in range(1, brokers) if f"maas{k}" not in before]
        subprocess.run(["bash", NODES_SCRIPT, "start", str(brokers)], check=True)

    def clean_up(self, keep: bool = False) -> None:
        """Deletes what was recorded, after the bench stopped whatever it started (an agent
        still running would make the vhosts again): the vhosts and users of every address
        space of the database (terminating ones too), on the broker each is placed on; the
        nodes; the database. Prints one line of what went, or with `keep` of what stays.
        Failures are counted and told, never raised: the rest is still deleted."""
        nodes = [f"maas{k}" for k in self.started]
        # rabbitmq-nodes.sh resets maas1..maas<N-1> together: only when the bench started all
        resettable = bool(nodes) and len(nodes) == self.brokers - 1
        if keep:
            try:
                spaces = self._spaces() if self.spaces and self.url else []
            except Exception:  # noqa: BLE001 - only a count for the line
                spaces = []
            kept = ([f"database {self.created}"] if self.created else []) + (
                [f"the vhosts and users of {len(spaces)} spaces"] if spaces else []) + (
                [f"nodes {', '.join(nodes)} running"] if nodes else [])
            print(f"kept (--keep): {', '.join(kept) or 'nothing of its own'}", flush=True)
            return
        done = []
        if self.spaces and self.url:
            done.append(self._tear_down_vhosts())
        if resettable:
            reset = subprocess.run(["bash", NODES_SCRIPT, "reset", str(self.brokers)])
            done.append(f"nodes {', '.join(nodes)} stopped and reset" if reset.returncode == 0
                        else f"nodes {', '.join(nodes)}: reset FAILED ({reset.returncode})")
        elif nodes:
            done.append(f"nodes {', '.join(nodes)} left running (others of maas1..maas"
                        f"{self.brokers - 1} ran before; rabbitmq-nodes.sh resets them "
                        f"together)")
        if self.created:
            done.append(self._drop_database())
        if self.router_state:
            shutil.rmtree(self.router_state, ignore_errors=True)
        print(f"removed: {'; '.join(done) or 'nothing of its own'}", flush=True)

    def _spaces(self) -> list:
        """Every address space of the bench's database (Django set up against it)."""
        from django.conf import settings

        from config_service.models import AddressSpace

        name = settings.DATABASES["default"]["NAME"]
        if name != self.url.rsplit("/", 1)[1]:
            raise RuntimeError(f"Django reads database {name}, not the bench's {self.url}")
        return list(AddressSpace.objects.select_related("tenant"))

    def _tear_down_vhosts(self) -> str:
        """Each space's vhost and MaaS's users of it deleted on its broker
        (BrokerReconciler.teardown, as the storage agent does), four at a time; a vhost made
        before this run began (its incarnation tag) is someone else's of the same name, which
        the bench's platform adopted: left alone."""
        from concurrent.futures import ThreadPoolExecutor

        from workers import endpoints
        from workers.agents.storage import rabbitmq
        from workers.agents.storage.rabbitmq_objects import INCARNATION_TAG_PREFIX
        from workers.clients.rabbitmq_api import RabbitMQApi

        failures: list[str] = []
        try:
            spaces = self._spaces()
        except Exception as exc:  # noqa: BLE001 - told, and the rest is still deleted
            return f"vhosts NOT torn down: {exc}"
        targets, apis = [], {}
        for space in spaces:
            try:
                broker = endpoints.of(space).broker
                # Not the agents' client (10 s): at a few hundred vhosts RabbitMQ deletes one
                # in turn with the others, and a delete took longer than that (seen at 520).
                api = apis.get(broker.api_url) or apis.setdefault(broker.api_url, RabbitMQApi(
                    broker.api_url, broker.api_user, broker.api_password, timeout=300))
                targets.append((space.vhost, api))
            except Exception as exc:  # noqa: BLE001 - e.g. a broker MAAS_RABBITMQ_NODES lacks
                failures.append(f"{space.vhost}: {exc}")

        def tear_down(target) -> tuple[int, int, bool]:
            vhost, api = target
            try:
                info = api.get_vhost(vhost)
                if info is not None:
                    tags = info.get("tags") or []
                    tags = tags.split(",") if isinstance(tags, str) else tags
                    made = [int(t[len(INCARNATION_TAG_PREFIX):]) for t in tags
                            if t.startswith(INCARNATION_TAG_PREFIX)
                            and t[len(INCARNATION_TAG_PREFIX):].isdigit()]
                    if not made or made[0] < self.since * 1000:
                        return 0, 0, True
                result = rabbitmq.BrokerReconciler(api).teardown(vhost)
            except Exception as exc:  # noqa: BLE001 - counted, the others go on
                failures.append(f"{vhost}: {exc}")
                return 0, 0, False
            if not result.ok:
                failures.append(f"{vhost}: {result.vhost_errors + list(result.errors.values())}"
                                f" {result.user_errors}")
            return (sum(d.startswith("vhost:") for d in result.deleted),
                    sum(d.startswith("user:") for d in result.deleted), False)

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(tear_down, targets))
        line = (f"{sum(r[0] for r in results)} vhosts and {sum(r[1] for r in results)} users "
                f"of {len(spaces)} spaces")
        if others := sum(r[2] for r in results):
            line += f" ({others} vhosts not made by this run left alone)"
        if failures:
            line += f", {len(failures)} FAILED, e.g. {failures[0][:200]}"
        return line

    def _drop_database(self) -> str:
        try:
            drop_database(self.url)
        except Exception as exc:  # noqa: BLE001 - told, the run's figures are printed already
            return f"database {self.created} NOT dropped: {exc}"
        return f"database {self.created} dropped"


def drop_database(url: str) -> None:
    """Drops the database of `url` (from its server's `postgres` database), closing this
    process's Django connections first and whatever else is connected (FORCE)."""
    from urllib.parse import urlsplit

    import psycopg

    try:
        from django.db import connections

        connections.close_all()
    except Exception:  # noqa: BLE001 - Django not set up here: none to close
        pass
    _vacuum_stop.set()
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    with psycopg.connect(parts._replace(path="/postgres").geturl(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def delete_queues(queue: str) -> None:
    """Drops the run's Celery queues and fan-out markers, so they do not pile up in Redis."""
    import redis

    url = os.environ.get("CELERY_BROKER_URL") or os.environ.get("REDIS_URL",
                                                                "redis://127.0.0.1:6379/0")
    client = redis.Redis.from_url(url)
    client.delete(queue, f"{queue}-resync", f"{queue}-usage")
    for key in client.scan_iter(f"maas:reconcile-pending:{queue}*"):
        client.delete(key)


_vacuum_stop = threading.Event()


def keep_vacuumed(database_url: str, every: float = 60.0) -> bool:
    """Where the server runs without autovacuum (this machine's CI PostgreSQL turns it off for
    speed), VACUUM (ANALYZE) the database every `every` seconds from a thread, as autovacuum
    would: the outbox's partial index otherwise keeps every row ever pending (1.57 million dead
    tuples after a 100k fill) and the planner never learns the tables' sizes. True if started."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        if conn.execute("show autovacuum").fetchone()[0] == "on":
            return False

    def run():
        while not _vacuum_stop.wait(every):  # until the database is dropped
            try:
                with psycopg.connect(database_url, autocommit=True) as conn:
                    conn.execute("vacuum (analyze)")
            except psycopg.Error as exc:
                print(f"  vacuum failed: {exc}", flush=True)

    threading.Thread(target=run, daemon=True, name="vacuum").start()
    return True


def unlimited_tenant(ctx):
    """A new tenant without quota limits, owned by `bench-owner`, with the default plans
    installed (Django set up): for benches that create spaces through the service functions."""
    import uuid

    from django.contrib.auth import get_user_model

    from tenants import default_plans
    from tenants.models import AddressPlan, AddressSpacePlan, TenantQuota
    from tenants.services import create_tenant

    default_plans.install(AddressPlan, AddressSpacePlan)
    owner, _ = get_user_model().objects.get_or_create(username="bench-owner")
    tenant = create_tenant(ctx=ctx, slug=f"bench-{uuid.uuid4().hex[:6]}", owner=owner)
    TenantQuota.objects.filter(tenant=tenant).update(max_address_spaces=None, max_addresses=None,
                                                     max_credits=None)
    return tenant
