"""Config distribution at scale (issue 16): fills the platform, then prints each figure of the
issue's table with the machine's load average. Printed, never asserted.

    .venv/bin/python tests/bench/bench_scale.py --tenants 10 --start            # ~10k addresses
    .venv/bin/python tests/bench/bench_scale.py --tenants 100 --start --jobs 2 --brokers 4  # ~100k
    # issue 67: the same on each router in turn (qdrouterd: the build QDROUTERD names)
    QDROUTERD=/opt/qdr/bin/qdrouterd .venv/bin/python tests/bench/bench_scale.py --tenants 100 \
        --start --jobs 2 --brokers 4 --settle 180 --router both
    # issue 66: 1,000 brokered spaces of 100 queues over four nodes
    .venv/bin/python tests/bench/bench_scale.py --tenants 100 --standard 0 --brokered 10 \
        --start --jobs 2 --brokers 4 --no-resync --settle 240
    # ... and 1,000 idle vhosts on one node (a pool node, off the default one; kept for reruns)
    bash deploy/local/rabbitmq-nodes.sh start 6 && bash deploy/local/rabbitmq-nodes.sh stop 5
    RABBITMQ_API_URL=http://127.0.0.1:15685/api RABBITMQ_AMQP_PORT=5685 RABBITMQ_MQTT_PORT=1895 \
        .venv/bin/python tests/bench/bench_scale.py --idle-vhosts 1000 --start --keep-idle

A broker takes at most MAAS_BROKER_MAX_SPACES spaces (500): 1,000 spaces need two brokers or
more (--brokers), or that bound raised.

With --start it runs the platform (`manage.py runplatform`, as `make run` does) on a database
of its own (`--database`, created and migrated if missing) and Celery queues of its own, and
stops it at the end (`MAAS_BIND=127.0.0.1:PORT` moves its web for `--url`); then it deletes
what the run left (tests/bench/common.py `Leftovers`): the RabbitMQ vhosts the run made for the
database's spaces and MaaS's users of them, the extra RabbitMQ nodes it started for --brokers
(not those running before), and the database if it created it; `--keep` leaves them for a later
look. Without --start it measures the platform that DATABASE_URL and --url point at and deletes
nothing.
Fills with `manage.py fill_addresses` (the service functions: per tenant STANDARD standard
spaces of 100 addresses and BROKERED brokered spaces of 100 queues), waits until every address
is Active (then waits --settle seconds, for figures at rest rather than in the fill's tail),
waits until its probe spaces are Active (their vhosts started: `spaces_active`), then measures:

- API create latency (REST, one at a time) and create -> Active (recorded by the platform:
  AppliedEvent.applied_at of the last agent minus the create call) for creates arriving at
  --rate per second spread over probe spaces, in three rounds of --probes each: anycast
  addresses over five standard spaces, queues over five brokered spaces (each round naming the
  broker its spaces are on and the vhosts it holds), then both kinds interleaved; and how many
  agents' spaces the platform's own drift checks (its resync, spread over the drift period)
  compared whole meanwhile;
- the cost of reconciling a one-address change: wall and CPU seconds of the router agent and
  the storage controller run in this process, SQL queries, and router entities or broker rows
  read, median of --repeat;
- server time of /metrics, of a page of the addresses list (API) and of the portal's
  addresses page of a space with --big addresses;
- a full resync of every space (drift check), with creates at --rate meanwhile;
- the RSS of every long-running process.

The issue's figures compare these at 1k, 10k and 100k addresses: run it once per size.
--idle-vhosts N makes N other tenants' idle vhosts (--idle-queues each) on the first broker
before anything else (tests/bench/idle_vhosts.py) and deletes them at the end unless --keep or
--keep-idle. The first broker is RabbitMQ of the settings (RABBITMQ_API_URL, RABBITMQ_AMQP_PORT,
RABBITMQ_MQTT_PORT): pointed at a pool node (`deploy/local/rabbitmq-nodes.sh`, node k on
15680+k, 5680+k and 1890+k) the idle vhosts stay off the default node the test suite shares.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.bench import idle_vhosts  # noqa: E402
from tests.bench.common import (  # noqa: E402
    KEEP_HELP,
    Leftovers,
    cpu_by_label,
    cpu_spent,
    delete_queues,
    keep_vacuumed,
    load,
    pids_of,
    schedstat,
)
from workers.clients.rabbitmq_api import RabbitMQApi  # noqa: E402

LOG_LEVEL = os.environ.get("MAAS_LOG_LEVEL", "INFO")


def pct(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q / 100))] * 1000


def manage(*args) -> str:
    out = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def rss_table(root_pid: int | None) -> list[tuple[str, int]]:
    """(command, RSS in MiB) of the platform's processes and the services it uses."""
    procs = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{pid}/status") as f:
                rss = next((int(line.split()[1]) for line in f if line.startswith("VmRSS")), 0)
        except (OSError, StopIteration, IndexError, ValueError):
            continue
        procs[int(pid)] = (ppid, cmd, rss)

    def under(pid):
        while pid in procs:
            if pid == root_pid:
                return True
            pid = procs[pid][0]
        return False

    rows = []
    for pid, (_, cmd, rss) in procs.items():
        service = any(s in cmd for s in ("beam.smp", "redis-server", "postgres: ", "qdrouterd"))
        if (root_pid and under(pid)) or service:
            rows.append((cmd[:90], rss // 1024))
    # postgres runs one process per connection: sum them
    pg = sum(r for c, r in rows if c.startswith("postgres: "))
    rows = [r for r in rows if not r[0].startswith("postgres: ")] + [("postgres (all)", pg)]
    return sorted(rows, key=lambda r: -r[1])


class Platform:
    def __init__(self, args):
        self.args, self.proc, self.queue = args, None, None

    def start(self):
        # (its embedded router's journal: Leftovers.ensure_database's, in the environment)
        env = dict(os.environ, MAAS_LOG_LEVEL=LOG_LEVEL)
        self.queue = env["MAAS_CELERY_QUEUE"]
        out = open(self.args.log, "w") if self.args.log else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "manage.py", "runplatform"], cwd=ROOT,
                                     stdout=out, stderr=subprocess.STDOUT, env=env)
        for _ in range(90):
            try:
                if requests.get(self.args.url + "/healthz", timeout=1).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(1)
        raise SystemExit("the platform did not answer /healthz in 90 s")

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        if self.queue:
            delete_queues(self.queue)


def counts():
    """(Active addresses, all addresses), counted as /metrics counts them."""
    from config_service.models import AddressSpace
    from config_service.status import agent_states
    from maas.metrics import phase_counts

    spaces = list(AddressSpace.objects.all())
    phases = phase_counts(spaces, agent_states(s.uid for s in spaces)).values()
    return sum(p["Active"] for p in phases), sum(sum(p.values()) for p in phases)


def wait_all_active(timeout: float, stall: float = 300.0) -> float:
    """Seconds until every address is Active; progress once a minute. nan after `timeout`, or
    once the count of Active addresses has not moved for `stall` seconds (a stalled broker:
    the 100k runs on one RabbitMQ 3.10 end there, docs/scale.md)."""
    began = last = moved = time.monotonic()
    seen = -1
    while time.monotonic() - began < timeout:
        active, total = counts()
        if active == total:
            return time.monotonic() - began
        if active != seen:
            seen, moved = active, time.monotonic()
        elif time.monotonic() - moved >= stall:
            print(f"  stalled: {active} of {total} Active, unchanged for {stall:.0f} s "
                  f"({load()})", flush=True)
            return float("nan")
        if time.monotonic() - last >= 60:
            last = time.monotonic()
            print(f"  {last - began:.0f} s: {active} of {total} Active ({load()})", flush=True)
        time.sleep(5)
    print(f"  not all Active after {timeout:.0f} s: {counts()}")
    return float("nan")


def spaces_active(slug: str, timeout: float = 600.0) -> float:
    """Seconds until every space of the tenant is Active (its agents applied it: on a broker,
    its vhost made and started), from now; nan after `timeout`. A new vhost starts after those
    before it, one at a time: at 1,000 vhosts on a node, seconds each. The probes measure
    changes to spaces that exist, so they wait for this first."""
    from config_service.models import AddressSpace
    from config_service.status import agent_states, space_status

    began = time.monotonic()
    while time.monotonic() - began < timeout:
        spaces = list(AddressSpace.objects.filter(tenant__slug=slug))
        states = agent_states([s.uid for s in spaces])
        if all(space_status(s, states.get(s.uid, {})).is_ready for s in spaces):
            return time.monotonic() - began
        time.sleep(0.5)
    return float("nan")


def probe_tenant(prefix: str, url: str) -> tuple[str, requests.Session, str]:
    """A new tenant without quota limits: (its slug, an API session as its owner, the URL of
    its address spaces)."""
    slug = f"{prefix}-{uuid.uuid4().hex[:6]}"
    manage("createtenant", slug, "--owner", f"{slug}-owner")
    token = manage("apitoken", f"{slug}-owner")
    manage("shell", "-c", "from tenants.models import TenantQuota as Q; Q.objects.filter("
           f"tenant__slug='{slug}').update(max_address_spaces=None, max_addresses=None)")
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    return slug, session, f"{url}/api/v1/tenants/{slug}/addressspaces"


def probe_creates(session, url, spaces, n, rate):
    """n creates at `rate`/s over the probe spaces; (latencies, {address name: called at},
    the web's [(seconds on a core, seconds waiting for one)] per create: its processes serve
    nothing else meanwhile, so what their threads ran and waited is each create's)."""
    latencies, called, web = [], {}, []
    web_pids = pids_of("web")
    interval = 1.0 / rate
    began = time.monotonic()
    for i in range(n):
        space_name, space_type = spaces[i % len(spaces)]
        name = f"{space_name}.p{uuid.uuid4().hex[:8]}"
        spec = ({"address": name.split(".")[1], "type": "queue", "plan": "brokered-queue"}
                if space_type == "brokered" else
                {"address": name.split(".")[1], "type": "anycast",
                 "plan": "standard-small-anycast"})
        called[name] = time.time()
        on, waited = schedstat(web_pids)
        started = time.monotonic()
        r = session.post(f"{url}/{space_name}/addresses/", json={"metadata": {"name": name},
                                                               "spec": spec})
        latencies.append(time.monotonic() - started)
        on_after, waited_after = schedstat(web_pids)
        web.append((on_after - on, waited_after - waited))
        r.raise_for_status()
        time.sleep(max(0.0, began + (i + 1) * interval - time.monotonic()))
    return latencies, called, web


# The probe: 200 creates, 10 s at 20/s. Its p99 is the second slowest of them, and
# the brokers copy their statistics every 30 s, so a window holds one copy or none: a longer
# run (--probes 1200) prints the p99 of each 200 in turn, how far one window's figure goes.
WINDOW = 200


def windows_p99(latencies) -> str:
    """The p99 of each WINDOW consecutive creates, in ms: min / median / max (n windows)."""
    p99s = sorted(pct(latencies[i:i + WINDOW], 99)
                  for i in range(0, len(latencies) - WINDOW + 1, WINDOW))
    return (f"{p99s[0]:.1f} / {statistics.median(p99s):.1f} / {p99s[-1]:.1f} ms "
            f"(min / median / max of {len(p99s)})")


def slowest(latencies, rate, web, n=4) -> str:
    """The n slowest creates of a probe run, each with when in the run it was sent and the
    web's time on a core and waiting for one: whether the p99 is one burst of other work or
    spread out, and whether it is the web waiting for the cores."""
    worst = sorted(range(len(latencies)), key=lambda i: -latencies[i])[:n]
    return ", ".join(f"{latencies[i] * 1000:.0f} ms at {i / rate:.1f} s (web "
                     f"{web[i][0] * 1000:.0f} on a core, {web[i][1] * 1000:.0f} waiting)"
                     for i in worst)


def to_active(called: dict, timeout=60.0, detail: dict | None = None) -> tuple[list[float], int]:
    """Seconds from each create call to its last agent's AppliedEvent (Active from then on),
    and how many were not Active by the timeout; `detail` gets {name: (space uid, the
    sequence that created it, seconds)} of those Active."""
    from config_service.models import Address, AppliedEvent
    from config_service.status import agents_for_address
    from eventlog.models import ConfigEvent

    names = list(called)
    # the event that created each address: (stream, sequence) = (space, resourceVersion)
    needed, created = {}, {}
    for name, uid, version, space_type, address_type in Address.objects.filter(
            name__in=names).values_list("name", "space__uid", "resource_version",
                                        "space__type", "type"):
        needed[(uid, version)] = (name, set(agents_for_address(space_type, address_type)))
    for uid, sequence, position in ConfigEvent.objects.filter(
            stream_id__in={uid for uid, _ in needed}, type="address.created").values_list(
            "stream_id", "sequence", "position"):
        if (uid, sequence) in needed:
            created[position] = needed[(uid, sequence)]
    deadline = time.monotonic() + timeout
    while True:
        applied: dict = {}  # position -> {kind: applied at}
        for position, kind, at in AppliedEvent.objects.filter(
                event_id__in=list(created)).values_list("event_id", "kind", "applied_at"):
            applied.setdefault(position, {})[kind] = at
        done = {}
        for position, (name, kinds) in created.items():
            at = applied.get(position, {})
            if kinds <= at.keys():  # Active once the last agent it needs applied it
                done[name] = max(at[k] for k in kinds).timestamp() - called[name]
                if detail is not None:
                    uid, sequence = next(k for k, v in needed.items() if v[0] == name)
                    detail[name] = (uid, sequence, done[name])
        if len(done) == len(names) or time.monotonic() > deadline:
            return list(done.values()), len(names) - len(done)
        time.sleep(1)


def where_time_went(log_path: str, called: dict, detail: dict, n: int = 4) -> str:
    """The n slowest creates to Active, each with the agent run that made it Active, from the
    platform log's `agent.applied` lines (workers/agents/runner.py): when after the call that
    run asked for its space's turn, how long it waited for it, how long it ran, whether it
    was a full diff or only the new entities, and where the run went (the router agent: its
    connection's opening, the answers it waited for by kind of request, in ms)."""
    worst = sorted(detail, key=lambda name: -detail[name][2])[:n]
    uids = {str(detail[name][0]) for name in worst}
    runs: dict = {}  # space uid -> [applied line]
    with open(log_path, errors="replace") as log:
        for line in log:
            if '"agent.applied"' not in line or not any(uid in line for uid in uids):
                continue
            row = json.loads(line)
            if row.get("space") in uids and "began" in row and not row.get("unaffected"):
                runs.setdefault(row["space"], []).append(row)
    out = []
    for name in worst:
        uid, sequence, seconds = detail[name]
        ended = called[name] + seconds
        # Active when the last agent it needs recorded a run that applied its sequence: the
        # run that ended nearest to that moment.
        candidates = [r for r in runs.get(str(uid), []) if r["sequence"] >= sequence]
        if not candidates:
            out.append(f"{seconds * 1000:.0f} ms (no run in the log)")
            continue
        row = min(candidates, key=lambda r: abs(r["began"] + r["run_ms"] / 1000 - ended))
        asked = row["began"] - row["lock_ms"] / 1000 - called[name]
        spent = ", ".join(f"{k} {v}" for k, v in sorted(row.get("timings", {}).items(),
                                                         key=lambda kv: -kv[1]))
        out.append(f"{seconds * 1000:.0f} ms: {row['agent']} asked {asked * 1000:.0f} ms after "
                   f"the call, waited {row['lock_ms']} for the space, ran {row['run_ms']} "
                   f"({'full diff' if row['whole'] else 'new entities'}"
                   f"{'; ' + spent if spent else ''})")
    return "; ".join(out)


def probe_round(session, base_url, spaces, args, total) -> None:
    """One round of creates at --rate over `spaces`, and its figures."""
    from django.utils import timezone

    began, cpu_before = timezone.now(), cpu_by_label()
    latencies, called, web = probe_creates(session, base_url, spaces, args.probes, args.rate)
    spent = cpu_spent(cpu_before)
    checked = drift_checks_since(began)
    detail: dict = {}
    active, missing = to_active(called, detail=detail)
    print(f"  API create latency ({total} present): p50 {pct(latencies, 50):.1f} ms  p99 "
          f"{pct(latencies, 99):.1f} ms")
    print(f"  create -> Active: p50 {pct(active, 50):.0f} ms  p99 {pct(active, 99):.0f} ms"
          f"  (not Active in 60 s: {missing}; {load()})")
    if len(latencies) >= 2 * WINDOW:
        print(f"  API p99 of each {WINDOW} creates in turn: {windows_p99(latencies)}")
    print(f"  meanwhile the platform's own drift checks compared {checked} agents' spaces "
          f"whole (its full resync, spread over MAAS_DRIFT_CHECK_PERIOD)")
    print(f"  slowest: {slowest(latencies, args.rate, web)}")
    if args.log and detail:
        print(f"  slowest to Active: {where_time_went(args.log, called, detail)}")
    print(f"  the web per create: on a core p50 {pct([w[0] for w in web], 50):.1f} ms, "
          f"waiting for a core p50 {pct([w[1] for w in web], 50):.1f} / p99 "
          f"{pct([w[1] for w in web], 99):.1f} ms")
    print(f"  CPU meanwhile: {spent}", flush=True)


def where_probed(probes, slug: str, space_type: str) -> str:
    """The brokers the probe spaces of `space_type` are placed on, each with the vhosts it
    holds (a vhost listing: read once, before the figures are printed)."""
    from config_service.models import AddressSpace
    from workers import endpoints

    spaces = AddressSpace.objects.filter(tenant__slug=slug, type=space_type,
                                         name__in=[n for n, t in probes if t == space_type])
    held = {}
    for space in spaces:
        broker = endpoints.of(space).broker
        if broker.api_url not in held:
            api = RabbitMQApi(broker.api_url, broker.api_user, broker.api_password, timeout=60)
            held[broker.api_url] = (broker.name or "shared", len(api.vhost_names()))
            api.close()
    return ", ".join(f"{name} of {n} vhosts" for name, n in held.values())


def drift_checks_since(began) -> int:
    """How many agent states were compared whole (a full diff: a drift check or a repair)
    since `began`: what of the platform's spread resync ran during a measurement."""
    from config_service.models import AgentState

    return AgentState.objects.filter(checked_at__gte=began).count()


def one_change_cost(repeat: int):
    """Median wall, CPU, SQL queries and target rows read of the router agent and the storage
    controller reconciling one space after one address was added to it ("new": what a create
    costs; the router agent's short path for an anycast address), and of a full diff of the
    same space with nothing new ("resync": what every resync and drift check costs).

    The bench holds the agent's lock of the space while it creates the address, so the
    platform's own worker does not apply the change first."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from config_service import services
    from config_service.models import AddressSpace
    from core.context import Context
    from workers.agents import runner
    from workers.agents.router.agent import RouterAgent, management_client
    from workers.agents.storage import agent as controller

    ctx = Context(actor="bench:scale")
    out = {}
    for kind, space_type in (("router", "standard"), ("storage", "brokered")):
        space = AddressSpace.objects.filter(type=space_type, name__in=("s0", "b0"),
                                            tenant__slug__startswith="scale-").first()
        if space is None:
            continue
        for case in ("new", "resync"):
            walls, cpus, queries, rows = [], [], [], []
            for _ in range(repeat):
                mgmt = management_client() if kind == "router" else None
                agent = RouterAgent(management=mgmt) if mgmt else controller.StorageController()
                with runner.serialised(space.uid, kind):
                    if case == "new":
                        services.create_address(
                            ctx=ctx, space=space, address=f"c{uuid.uuid4().hex[:8]}",
                            type="anycast" if space_type == "standard" else "queue",
                            plan="standard-small-anycast" if space_type == "standard"
                            else "brokered-queue")
                    w, c = time.monotonic(), time.process_time()
                    with CaptureQueriesContext(connection) as q:
                        runner.run(space.uid, kind, agent)
                    walls.append(time.monotonic() - w)
                    cpus.append(time.process_time() - c)
                queries.append(len(q.captured_queries))
                if mgmt is not None:
                    rows.append(mgmt.rows_read)
                    mgmt.close()
            out[f"{kind}, {case}"] = (statistics.median(walls), statistics.median(cpus),
                                      statistics.median(queries),
                                      statistics.median(rows) if rows else None)
    return out


def server_time(get, repeat=7) -> float:
    times = []
    for _ in range(repeat):
        t = time.monotonic()
        r = get()
        times.append(time.monotonic() - t)
        assert r.status_code == 200, r.status_code
    return statistics.median(times) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=1)
    parser.add_argument("--standard", type=int, default=8)
    parser.add_argument("--brokered", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--big", type=int, default=0,
                        help="addresses of one extra space for the portal page (issue: 20000)")
    parser.add_argument("--probes", type=int, default=200, help="creates for the latencies")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--database", default="maas_bench_scale")
    parser.add_argument("--start", action="store_true")
    parser.add_argument("--brokers", type=int, default=0,
                        help="with --start: spread the spaces over this many local RabbitMQ "
                             "nodes (MAAS_RABBITMQ_NODES; deploy/local/rabbitmq-nodes.sh)")
    parser.add_argument("--keep", action="store_true", help="with --start: " + KEEP_HELP)
    parser.add_argument("--log")
    parser.add_argument("--no-resync", action="store_true")
    parser.add_argument("--stall", type=float, default=300,
                        help="seconds without a new Active address that end the wait")
    parser.add_argument("--probe-unconverged", action="store_true",
                        help="run the probes even when the fill did not converge")
    parser.add_argument("--converge-timeout", type=float, default=3600,
                        help="seconds to wait for every filled address to be Active")
    parser.add_argument("--settle", type=float, default=0,
                        help="seconds to wait after the fill converged before the probes, so "
                             "they measure the platform at rest with the fleet present, not "
                             "the fill's tail (its queued drift checks, the brokers' statistics)")
    parser.add_argument("--idle-vhosts", type=int, default=0,
                        help="other tenants' idle vhosts made straight on the pool's first "
                             "broker before the platform starts (tests/bench/idle_vhosts.py; "
                             "deleted at the end unless --keep): with one broker, the "
                             "brokered probes run beside them")
    parser.add_argument("--idle-queues", type=int, default=100,
                        help="queues of each idle vhost (each with its exchange and binding)")
    parser.add_argument("--keep-idle", action="store_true",
                        help="leave the idle vhosts for the next run (1,000 take half an hour "
                             "or more to make) and delete the rest as usual")
    parser.add_argument("--router", choices=("embedded", "qdrouterd", "both"),
                        default="qdrouterd" if os.environ.get("QDROUTERD") else "embedded",
                        help="the platform's router (qdrouterd: the build QDROUTERD names, the "
                             "default when it is set); both: the whole run on each in turn, "
                             "the embedded router first")
    args = parser.parse_args()

    if args.router == "both":
        for router in ("embedded", "qdrouterd"):
            print(f"=== router: {router}", flush=True)
            argv = [a for a in sys.argv[1:] if a not in ("--router", "both")]
            if args.log:
                argv[argv.index("--log") + 1] = f"{args.log}.{router}"
            subprocess.run([sys.executable, __file__, *argv, "--router", router], check=False)
        return
    if args.router == "qdrouterd" and not os.environ.get("QDROUTERD"):
        parser.error("--router qdrouterd needs QDROUTERD naming a qdrouterd 1.19 build")
    if args.router == "embedded":
        os.environ.pop("QDROUTERD", None)  # runplatform runs qdrouterd whenever it is set
    print(f"router: {args.router}" + (f" ({os.environ['QDROUTERD']})"
                                      if args.router == "qdrouterd" else ""), flush=True)

    leftovers = Leftovers()  # what --start makes here; without it, nothing is recorded
    if args.start:
        os.environ["DATABASE_URL"] = leftovers.ensure_database(args.database)
        # The platform's Celery queues, also for the changes this process makes
        os.environ.setdefault("MAAS_CELERY_QUEUE", f"maas-bench-{uuid.uuid4().hex[:6]}")
        if args.brokers:  # the platform, fill_addresses and this process place alike
            os.environ["MAAS_RABBITMQ_NODES"] = str(args.brokers)
            leftovers.start_nodes(args.brokers)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "maas.settings")
    os.environ["MAAS_LOG_LEVEL"] = "WARNING"  # this process's own lines; the platform keeps its
    import django
    django.setup()
    from django.test import Client

    from config_service.models import Address, AddressSpace

    idle_api = None
    if args.idle_vhosts:
        from config_service.brokers import shared_broker
        broker = shared_broker()
        idle_api = RabbitMQApi(broker.api_url, broker.api_user, broker.api_password, timeout=600)
        took = idle_vhosts.ensure(idle_api, args.idle_vhosts, args.idle_queues,
                                  log=lambda m: print(m, flush=True))
        print(f"idle vhosts: {args.idle_vhosts} of {args.idle_queues} queues on "
              f"{broker.api_url} ({took:.0f} s to make those missing; {load()})", flush=True)

    platform = Platform(args)
    if args.start:
        # What Redis keeps of the router at this URL is of an earlier run's router, possibly of
        # the other kind (--router both): an embedded router taken for a shared qdrouterd.
        from django.conf import settings

        from workers.agents.router import tables
        tables.forget(settings.MAAS_ROUTER_MANAGEMENT_URL)
        platform.start()
        if keep_vacuumed(os.environ["DATABASE_URL"]):
            print("autovacuum is off on this server: VACUUM (ANALYZE) every 60 s instead")
    try:
        print(f"machine: {os.cpu_count()} cores, {load()}")
        began = time.monotonic()
        subprocess.run([sys.executable, "manage.py", "fill_addresses", "--tenants",
                        str(args.tenants), "--standard", str(args.standard), "--brokered",
                        str(args.brokered), "--jobs", str(args.jobs)], cwd=ROOT, check=True,
                       env=dict(os.environ, MAAS_LOG_LEVEL="WARNING"), stdout=subprocess.DEVNULL)
        filled = time.monotonic() - began
        converged = wait_all_active(args.converge_timeout, args.stall)
        total = Address.objects.count()
        print(f"fill: {total} addresses in {AddressSpace.objects.count()} spaces; created in "
              f"{filled:.0f} s, all Active {converged:.0f} s later ({load()})")
        if math.isnan(converged) and not args.probe_unconverged:
            # The probes would measure a stalled broker, not the platform.
            print("RSS (MiB):")
            for cmd, mib in rss_table(platform.proc.pid if platform.proc else None):
                print(f"  {mib:6d}  {cmd}")
            return

        slug, session, base_url = probe_tenant("probe", args.url)
        probes = [(f"ps{i}", "standard") for i in range(5)] + [(f"pb{i}", "brokered")
                                                               for i in range(5)]
        for name, space_type in probes:
            plan = "standard-unlimited" if space_type == "standard" else "brokered-single-broker"
            session.post(base_url + "/", json={"metadata": {"name": name}, "spec": {
                "type": space_type, "plan": plan}}).raise_for_status()
        print(f"probe spaces: Active {spaces_active(slug):.1f} s after their creates "
              f"({load()})", flush=True)
        if args.big:
            manage("shell", "-c", _BIG_SPACE.format(slug=slug, n=args.big))
        wait_all_active(600)
        settle(args.settle)

        # The probes: anycast addresses and queues at --rate, each kind alone, then
        # (issue 16's) the two kinds interleaved.
        rounds = [(f"anycast addresses in standard spaces, {where_probed(probes, slug, 'standard')}",
                   [p for p in probes if p[1] == "standard"]),
                  (f"queues in brokered spaces, {where_probed(probes, slug, 'brokered')}",
                   [p for p in probes if p[1] == "brokered"]),
                  ("both kinds interleaved", probes)]
        for what, spaces in rounds:
            print(f"{args.probes} creates at {args.rate:.0f}/s over {len(spaces)} spaces: {what}")
            probe_round(session, base_url, spaces, args, total)

        for kind, (wall, cpu, queries, rows) in one_change_cost(args.repeat).items():
            print(f"reconcile ({kind}): wall {wall * 1000:.1f} ms  CPU "
                  f"{cpu * 1000:.1f} ms  SQL queries {queries:.0f}"
                  + (f"  router entities read {rows:.0f}" if rows is not None else ""))

        client = Client()
        print(f"/metrics server time: {server_time(lambda: client.get('/metrics')):.1f} ms"
              f" (in process, median of 7)")
        print(f"addresses list, first page of 100 (API, HTTP): "
              f"{server_time(lambda: session.get(base_url + '/ps0/addresses/')):.1f} ms")
        if args.big:
            from django.contrib.auth import get_user_model
            client.force_login(get_user_model().objects.get(username=f"{slug}-owner"))
            for what, page in (("space page", f"/portal/t/{slug}/spaces/big/"),
                               ("addresses table", f"/portal/t/{slug}/spaces/big/addresses/")):
                print(f"portal {what}, space of {args.big} addresses: "
                      f"{server_time(lambda page=page: client.get(page)):.1f} ms (in process)")

        if not args.no_resync:
            resync(session, base_url, probes, args)

        print("RSS (MiB):")
        for cmd, mib in rss_table(platform.proc.pid if platform.proc else None):
            print(f"  {mib:6d}  {cmd}")
    finally:
        platform.stop()
        if args.start:  # without, it measured someone else's platform: nothing is deleted
            leftovers.clean_up(keep=args.keep)
        if idle_api is not None and not (args.keep or args.keep_idle):
            print(f"removed: {idle_vhosts.remove(idle_api)} idle vhosts")


def settle(seconds: float) -> None:
    """Waits `seconds`, printing the load average each minute."""
    if seconds <= 0:
        return
    print(f"settling {seconds:.0f} s before the probes ({load()})", flush=True)
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        time.sleep(min(60.0, left))
        print(f"  {seconds - max(0.0, until - time.monotonic()):.0f} s: {load()}", flush=True)


def resync(session, base_url, probes, args):
    """Every space reconciled again as a drift check, with creates at --rate meanwhile."""
    from django.db.models import Min

    from config_service.models import AddressSpace, AgentState
    from workers import dispatch

    began_at = time.time()
    from django.utils import timezone
    now = timezone.now()
    uids = list(AddressSpace.objects.values_list("uid", flat=True))
    began = time.monotonic()
    for uid in uids:
        dispatch.queue_reconcile(uid, resync=True)
    result = {}

    def creates():
        result["latencies"], result["called"], _ = probe_creates(session, base_url, probes,
                                                                 args.probes, args.rate)
    cpu_before = cpu_by_label()
    load_thread = threading.Thread(target=creates)
    load_thread.start()
    while time.monotonic() - began < 3600:
        oldest = AgentState.objects.filter(space_uid__in=uids).aggregate(m=Min("applied_at"))["m"]
        if oldest and oldest >= now:
            break
        time.sleep(2)
    took = time.monotonic() - began
    load_thread.join()
    spent = cpu_spent(cpu_before)
    active, missing = to_active(result["called"])
    print(f"full resync of {len(uids)} spaces: {took:.0f} s; meanwhile create -> Active p50 "
          f"{pct(active, 50):.0f} ms  p99 {pct(active, 99):.0f} ms (not Active: {missing}); "
          f"API p99 {pct(result['latencies'], 99):.1f} ms ({load()}; started {began_at:.0f})")
    print(f"  CPU meanwhile: {spent}")


_BIG_SPACE = """
from config_service import services
from config_service.models import AddressSpace
from core.context import Context
from tenants.models import Tenant
ctx = Context(actor="bench:scale")
tenant = Tenant.objects.get(slug="{slug}")
space = services.create_address_space(ctx=ctx, tenant=tenant, name="big", type="standard",
                                      plan="standard-unlimited")
for start in range(0, {n}, 1000):  # AddressList-sized batches
    services.create_addresses(ctx=ctx, space=space, items=[
        {{"address": f"a{{i}}", "type": "anycast", "plan": "standard-small-anycast"}}
        for i in range(start, min(start + 1000, {n}))])
"""


if __name__ == "__main__":
    main()
