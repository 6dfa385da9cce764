"""Printing objects: kubectl-style tables (default and `-o wide`), YAML, JSON, names, and
`describe`'s readable form of spec and status (and a connection's metrics and links)."""
import datetime
import json
import re

import yaml

from .kinds import Kind


def age(timestamp: str | None, now: datetime.datetime | None = None) -> str:
    """kubectl's AGE: 42s, 7m, 5h, 3d."""
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    if then.tzinfo is None:
        then = then.replace(tzinfo=datetime.UTC)
    seconds = int(((now or datetime.datetime.now(datetime.UTC)) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= size):
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _status_text(obj: dict) -> str:
    status = obj.get("status") or {}
    messages = status.get("messages") or ([status["message"]] if status.get("message") else [])
    return "; ".join(str(m) for m in messages)


def _endpoints(obj: dict) -> str:
    out = []
    for e in (obj.get("status") or {}).get("endpointStatuses") or []:
        for p in e.get("servicePorts") or []:
            out.append(f"{p.get('name')}://{e.get('serviceHost')}:{p.get('port')}")
    return ",".join(out)


def _connectors(obj: dict) -> str:
    """A space's connectors to remote endpoints: `site=ready`, `rabbit=notready` (the reasons
    are in `describe`)."""
    return ",".join(f"{c.get('name')}={'ready' if c.get('isReady') else 'notready'}"
                    for c in (obj.get("status") or {}).get("connectors") or [])


def _rules(obj: dict) -> str:
    rules = (obj.get("spec") or {}).get("authorization") or []
    return ";".join(f"{','.join(r.get('addresses', []))}:{','.join(r.get('operations', []))}"
                    for r in rules)


def _s(obj, *path, default=""):
    for key in path:
        if not isinstance(obj, dict):
            return default
        obj = obj.get(key)
    return default if obj is None else obj


def _ready(obj) -> str:
    value = _s(obj, "status", "isReady", default=None)
    return "" if value is None else str(value).lower()


# (header, function of the object, shown only with -o wide)
COLUMNS = {
    "AddressSpace": [
        ("NAME", lambda o: _s(o, "metadata", "name"), False),
        ("TYPE", lambda o: _s(o, "spec", "type"), False),
        ("PLAN", lambda o: _s(o, "spec", "plan"), False),
        ("READY", _ready, False),
        ("PHASE", lambda o: _s(o, "status", "phase"), False),
        ("AGE", lambda o: age(_s(o, "metadata", "creationTimestamp", default=None)), False),
        ("CONNECTORS", _connectors, True),
        ("STATUS", _status_text, True),
        ("ENDPOINTS", _endpoints, True),
    ],
    "Address": [
        ("NAME", lambda o: _s(o, "metadata", "name"), False),
        ("ADDRESS", lambda o: _s(o, "spec", "address"), False),
        ("TYPE", lambda o: _s(o, "spec", "type"), False),
        ("PLAN", lambda o: _s(o, "spec", "plan"), False),
        ("READY", _ready, False),
        ("PHASE", lambda o: _s(o, "status", "phase"), False),
        ("AGE", lambda o: age(_s(o, "metadata", "creationTimestamp", default=None)), False),
        ("STATUS", _status_text, True),
        ("TOPIC", lambda o: _s(o, "spec", "topic"), True),
        ("BROKERS", lambda o: ",".join(str(b.get("containerId", b)) if isinstance(b, dict)
                                       else str(b)
                                       for b in _s(o, "status", "brokerStatuses") or []), True),
    ],
    "MessagingUser": [
        ("NAME", lambda o: _s(o, "metadata", "name"), False),
        ("USERNAME", lambda o: _s(o, "spec", "username"), False),
        ("TYPE", lambda o: _s(o, "spec", "authentication", "type"), False),
        ("PHASE", lambda o: _s(o, "status", "phase"), False),
        ("AGE", lambda o: age(_s(o, "metadata", "creationTimestamp", default=None)), False),
        ("AUTHORIZATION", _rules, True),
        ("CONNECTION", lambda o: ",".join(_s(o, "status", "connectionUrls") or []), True),
    ],
    "AddressSpacePlan": [
        ("NAME", lambda o: _s(o, "metadata", "name"), False),
        ("TYPE", lambda o: _s(o, "spec", "addressSpaceType"), False),
        ("DISPLAY NAME", lambda o: _s(o, "spec", "displayName"), False),
        ("LIMITS", lambda o: ",".join(f"{k}={v}" for k, v in
                                      (_s(o, "spec", "resourceLimits") or {}).items()), True),
        ("ADDRESS PLANS", lambda o: ",".join(_s(o, "spec", "addressPlans") or []), True),
    ],
    "AddressPlan": [
        ("NAME", lambda o: _s(o, "metadata", "name"), False),
        ("TYPE", lambda o: _s(o, "spec", "addressType"), False),
        ("DISPLAY NAME", lambda o: _s(o, "spec", "displayName"), False),
        ("RESOURCES", lambda o: ",".join(f"{k}={v}" for k, v in
                                         (_s(o, "spec", "resources") or {}).items()), True),
        ("PARTITIONS", lambda o: _s(o, "spec", "partitions"), True),
    ],
    "Connection": [
        ("NAME", lambda o: _s(o, "metadata", "name"), False),
        ("USER", lambda o: _s(o, "spec", "principal"), False),
        ("PROTOCOL", lambda o: _s(o, "spec", "protocol"), False),
        ("HOST", lambda o: _s(o, "spec", "hostname"), False),
        ("CONTAINER", lambda o: _s(o, "spec", "containerId"), False),
        ("SENDERS", lambda o: _s(o, "metrics", "senders"), False),
        ("RECEIVERS", lambda o: _s(o, "metrics", "receivers"), False),
        ("IN", lambda o: _s(o, "metrics", "messagesIn"), False),
        ("OUT", lambda o: _s(o, "metrics", "messagesOut"), False),
        ("AGE", lambda o: age(_s(o, "metadata", "creationTimestamp", default=None)), False),
        ("VIA", lambda o: _s(o, "spec", "via"), True),
        ("ENCRYPTED", lambda o: str(_s(o, "spec", "encrypted")).lower(), True),
        ("MECHANISM", lambda o: _s(o, "spec", "saslMechanism"), True),
    ],
    "Tenant": [
        ("NAME", lambda o: _s(o, "metadata", "name"), False),
        ("DISPLAY NAME", lambda o: _s(o, "spec", "displayName"), False),
        ("ROLE", lambda o: _s(o, "status", "role"), False),
        ("PHASE", lambda o: _s(o, "status", "phase"), False),
        ("AGE", lambda o: age(_s(o, "metadata", "creationTimestamp", default=None)), False),
    ],
}


def table(rows: list[list[str]]) -> str:
    """Columns padded to their widest cell plus three spaces, as kubectl prints them."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["   ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    return "\n".join(lines)


def objects_table(kind: Kind, objects: list[dict], wide: bool) -> str:
    columns = [c for c in COLUMNS[kind.kind] if wide or not c[2]]
    return table([[h for h, _, _ in columns]] + [[str(f(o)) for _, f, _ in columns]
                                                 for o in objects])


def dump(data, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=4, ensure_ascii=False)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip("\n")


def as_list(objects: list[dict]) -> dict:
    return {"apiVersion": "v1", "kind": "List", "items": objects,
            "metadata": {"resourceVersion": ""}}


# describe -----------------------------------------------------------------------------------

def title(key: str) -> str:
    """kubectl describe's field names: `endpointStatuses` -> `Endpoint Statuses`."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key).replace("_", " ").split()
    return " ".join(w[:1].upper() + w[1:] for w in words)


def _scalar(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "<none>"
    text = str(value)
    return text if len(text) <= 120 else f"{text[:60]}... ({len(text)} characters)"


def _describe(value, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    if isinstance(value, dict):
        width = max((len(title(k)) + 1 for k in value), default=0) + 2  # "Key:" + 2 spaces
        for key, item in value.items():
            label = f"{title(key)}:"
            if isinstance(item, dict | list) and item:
                out.append(pad + label)
                _describe(item, indent + 1, out)
            else:
                shown = "<none>" if isinstance(item, dict | list) else _scalar(item)
                out.append((pad + label.ljust(width) + shown).rstrip())
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict | list):
                lines: list[str] = []
                _describe(item, 0, lines)
                for i, line in enumerate(lines):
                    out.append(pad + ("- " if i == 0 else "  ") + line)
            else:
                out.append(pad + "- " + _scalar(item))


def describe(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    head = {"Name": meta.get("name", ""), "Tenant": meta.get("namespace", ""),
            "Kind": obj.get("kind", ""), "API Version": obj.get("apiVersion", "")}
    if meta.get("addressSpace"):
        head["Address Space"] = meta["addressSpace"]
    head.update({"Created": meta.get("creationTimestamp", ""),
                 "Resource Version": meta.get("resourceVersion", ""), "UID": meta.get("uid", "")})
    out = [f"{k + ':':<18}{v}" for k, v in head.items() if v not in ("", None)]
    for part in ("spec", "status", "metrics"):  # metrics: a connection's
        if obj.get(part):
            out.append(f"{part.title()}:")
            _describe(obj[part], 1, out)
    if "links" in obj:  # a connection read by its id
        out.append("Links:" + ("" if obj["links"] else "  <none>"))
        if obj["links"]:
            out += ["  " + line for line in links_table(obj["links"]).splitlines()]
    return "\n".join(out)


LINK_METRICS = ("deliveries", "credit", "unsettled", "accepted", "rejected", "released",
                "modified", "presettled", "undelivered")


def links_table(links: list[dict]) -> str:
    """A connection's links, one row each; the link's name (often a UUID) last."""
    return table([["ROLE", "ADDRESS", *(m.upper() for m in LINK_METRICS), "NAME"]] +
                 [[_s(link, "role"), _s(link, "address"),
                   *(_s(link, "metrics", m) for m in LINK_METRICS), _s(link, "name")]
                  for link in links])


# usage --------------------------------------------------------------------------------------

def usage_text(report: dict) -> str:
    """The usage report: per address, the tenant's daily totals, then the quota state."""
    key = "hour" if report.get("granularity") == "hourly" else "day"
    out = [f"Tenant {report.get('tenant')}, {report.get('from')} to {report.get('to')} "
           f"({report.get('granularity')})", ""]
    items = report.get("items") or []
    if items:
        out.append(table([[key.upper(), "SPACE", "ADDRESS", "MSGS IN", "MSGS OUT", "BYTES IN",
                           "BYTES OUT", "STORED"]] +
                         [[i.get(key), i.get("space"), i.get("address"), i.get("messages_in"),
                           i.get("messages_out"), i.get("bytes_in"), i.get("bytes_out"),
                           i.get("stored_messages")] for i in items]))
    else:
        out.append("No usage recorded in this period.")
    daily = report.get("tenantDaily") or []
    if daily:
        out += ["", table([["DAY", "MESSAGES", "BYTES", "STORED BYTES", "CONNECTIONS"]] +
                          [[d.get("day"), d.get("messages"), d.get("bytes"),
                            d.get("stored_bytes"), d.get("connections")] for d in daily])]
    quota = report.get("quota") or {}
    state = "throttled (" + ", ".join(quota.get("throttledLimits") or []) + ")" \
        if quota.get("throttled") else "not throttled"
    out += ["", f"Quota: {state}; last evaluated {quota.get('evaluatedDay') or 'never'}"]
    limits = quota.get("limits") or []
    if limits:
        out.append(table([["LIMIT", "USED", "MAXIMUM", "SHARE", "BREACHED", "FORECAST"]] +
                         [[q.get("name"), q.get("used"), q.get("limit"), q.get("share"),
                           str(q.get("breached")).lower(), q.get("forecastDay") or ""]
                          for q in limits]))
    return "\n".join(out)
