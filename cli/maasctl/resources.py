"""apply, get, delete and wait on MaaS objects through the API (kubectl's verbs)."""
import copy
import re
import time
from dataclasses import dataclass

from . import kinds
from .client import Client
from .errors import ApiError, TimedOut, UsageError
from .kinds import Kind

# Fields the server owns: never sent back in a manifest.
SERVER_METADATA = ("namespace", "uid", "creationTimestamp", "resourceVersion", "generation",
                   "managedFields", "selfLink")


@dataclass
class Target:
    """One object on the server: its kind and name, in the current tenant."""

    kind: Kind
    name: str
    tenant: str

    @property
    def path(self) -> str:
        return self.kind.object_path(self.name, self.tenant)

    @property
    def ref(self) -> str:  # address.enmasse.io/shop.orders
        return f"{self.kind.ref}/{self.name}"

    def not_found(self) -> str:
        return f'{self.kind.plural}.{self.kind.group} "{self.name}" not found'


def target(kind: Kind, name: str, tenant: str) -> Target:
    if kind.live and "." not in name:
        raise UsageError(f'give the address space of {kind.kind.lower()} "{name}": -s SPACE, '
                         f"or name it <address space>.<id> (e.g. myspace.router-12)")
    if kind.in_space:
        kinds.space_of(name)
    return Target(kind, name, tenant)


def of_manifest(doc: dict, tenant: str) -> Target:
    kind = kinds.of_manifest(doc)
    name = (doc.get("metadata") or {}).get("name")
    if not name or not isinstance(name, str):
        raise UsageError(f"a {kind.kind} manifest needs metadata.name")
    return target(kind, name, tenant)


def _is_subset(wanted, actual) -> bool:
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(
            k in actual and _is_subset(v, actual[k]) for k, v in wanted.items())
    return wanted == actual


def _body(doc: dict) -> dict:
    body = copy.deepcopy(doc)
    body.pop("status", None)
    meta = body.setdefault("metadata", {})
    for key in SERVER_METADATA:
        meta.pop(key, None)
    return body


def apply(client: Client, doc: dict, tenant: str) -> str:
    """Creates the object, or updates it (PUT with its resourceVersion) where its spec differs;
    returns kubectl's line: `address.enmasse.io/shop.orders created|configured|unchanged`."""
    t = of_manifest(doc, tenant)
    body = _body(doc)
    try:
        current = client.get(t.path)
    except ApiError as exc:
        if exc.status != 404:
            raise
        current = None
    if current is None:
        space = kinds.space_of(t.name) if t.kind.in_space else ""
        try:
            client.post(t.kind.list_path(tenant, space), body)
        except ApiError as exc:
            if exc.status == 405:
                raise ApiError(405, f"this MaaS server does not support creating "
                                    f"{t.kind.kind} objects (POST answered 405)") from None
            raise
        return f"{t.ref} created"
    if _is_subset(body.get("spec") or {}, current.get("spec") or {}):
        return f"{t.ref} unchanged"
    body["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
    try:
        client.put(t.path, body)
    except ApiError as exc:
        if exc.status == 405:
            raise ApiError(405, f"this MaaS server does not support changing {t.kind.kind} "
                                "objects (PUT answered 405)") from None
        raise
    return f"{t.ref} configured"


def get(client: Client, t: Target) -> dict:
    try:
        return client.get(t.path)
    except ApiError as exc:
        if exc.status == 404:
            exc.args = (f"{t.not_found()}: {exc}",)
        raise


def spaces_of(client: Client, tenant: str) -> list[str]:
    space_kind = kinds.BY_KIND["AddressSpace"]
    return [s["metadata"]["name"] for s in client.items(space_kind.list_path(tenant))]


def list_objects(client: Client, kind: Kind, tenant: str, space: str | None,
                 params: dict | None = None) -> list[dict]:
    """Every object of a kind; addresses and users of one space, or of all of them;
    connections of one space (each space's are read from its router or broker, which may
    not answer)."""
    if not kind.in_space:
        return client.items(kind.list_path(tenant), params)
    if kind.live and not space:
        raise UsageError(f"{kind.plural} are listed one address space at a time: "
                         "give -s SPACE")
    spaces = [space] if space else spaces_of(client, tenant)
    return [o for s in spaces for o in client.items(kind.list_path(tenant, s), params)]


def delete(client: Client, t: Target, ignore_not_found: bool = False) -> str | None:
    try:
        client.delete(t.path)
    except ApiError as exc:
        if exc.status == 404:
            if ignore_not_found:
                return None
            exc.args = (f"{t.not_found()}: {exc}",)
        raise
    return f'{t.kind.ref} "{t.name}" {"closed" if t.kind.live else "deleted"}'


# wait ---------------------------------------------------------------------------------------

DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")


def duration(text: str) -> float:
    """Seconds of `60s`, `2m`, `500ms`, `1h` or a bare number of seconds."""
    m = DURATION.match(text.strip())
    if not m:
        raise UsageError(f"invalid duration {text!r} (e.g. 30s, 2m, 500ms)")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


@dataclass
class Condition:
    """`--for=phase=Active`, `--for=condition=Ready` (status.isReady, or phase Active where
    a kind has no isReady) or `--for=delete`."""

    text: str

    def __post_init__(self):
        key, _, value = self.text.partition("=")
        if key == "delete" and not value:
            self.key, self.value = "delete", ""
        elif key in ("phase", "condition") and value:
            if key == "condition" and value.lower() != "ready":
                raise UsageError("the only condition is Ready (status.isReady); "
                                 "or wait for --for=phase=NAME")
            self.key, self.value = key, value
        else:
            raise UsageError(f"invalid --for {self.text!r}: phase=NAME, condition=Ready "
                             "or delete")

    def met(self, obj: dict | None) -> bool:
        if self.key == "delete":
            return obj is None
        if obj is None:
            return False
        status = obj.get("status") or {}
        if self.key == "phase":
            return str(status.get("phase", "")).lower() == self.value.lower()
        if "isReady" in status:
            return status["isReady"] is True
        return status.get("phase") == "Active"  # a MessagingUser has no isReady


def _state(obj: dict | None) -> str:
    if obj is None:
        return "not found"
    status = obj.get("status") or {}
    messages = status.get("messages") or ([status["message"]] if status.get("message") else [])
    text = f"phase {status.get('phase') or 'unknown'}"
    return text + (f": {'; '.join(map(str, messages))}" if messages else "")


def wait(client: Client, targets: list[Target], condition: Condition, timeout: float,
         interval: float = 0.5, report=print) -> None:
    """Polls each object until the condition holds; TimedOut (exit 3) past the deadline."""
    deadline = time.monotonic() + timeout
    for t in targets:
        while True:
            try:
                obj = client.get(t.path)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                if condition.key != "delete":
                    exc.args = (f"{t.not_found()}: {exc}",)
                    raise
                obj = None
            if condition.met(obj):
                report(f"{t.ref} condition met")
                break
            if time.monotonic() >= deadline:
                raise TimedOut(f"timed out waiting for the condition on {t.kind.plural}/"
                               f"{t.name} ({_state(obj)})")
            time.sleep(min(interval, max(deadline - time.monotonic(), 0.01)))
