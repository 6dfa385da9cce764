"""What several benchmarks set up and tear down alike: a migrated database of their own, kept
vacuumed where the server does not, and their Celery queues in Redis afterwards; a
process's CPU time, and every process's, summed by what it is; the time a process's threads
ran and waited for a core."""
import os
import subprocess
import sys
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


def ensure_database(name: str) -> str:
    """The URL of database `name` on the local PostgreSQL, created and migrated if need be."""
    import psycopg

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres",
                         autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgres://postgres@127.0.0.1:5432/{name}"
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                   env=dict(os.environ, DATABASE_URL=url))
    return url


def delete_queues(queue: str) -> None:
    """Drops the run's Celery queues and fan-out markers, so they do not pile up in Redis."""
    import redis

    url = os.environ.get("CELERY_BROKER_URL") or os.environ.get("REDIS_URL",
                                                                "redis://127.0.0.1:6379/0")
    client = redis.Redis.from_url(url)
    client.delete(queue, f"{queue}-resync", f"{queue}-usage")
    for key in client.scan_iter(f"maas:reconcile-pending:{queue}*"):
        client.delete(key)


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
        while True:
            time.sleep(every)
            try:
                with psycopg.connect(database_url, autocommit=True) as conn:
                    conn.execute("vacuum (analyze)")
            except psycopg.Error as exc:
                print(f"  vacuum failed: {exc}", flush=True)

    threading.Thread(target=run, daemon=True, name="vacuum").start()
    return True
