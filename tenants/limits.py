"""The usage limits of a tenant quota and the one breach rule, shared by the services and the
live evaluation (workers/usage/live.py); tests/spark/test_live.py proves it equal
to the Spark job's (spark/quota.py), which may import no app."""

# Limit -> the tenant-day measure it is checked against (docs/usage.md, "Quotas").
USAGE_LIMITS = {
    "messages_per_day": "messages",
    "bytes_per_day": "bytes",
    "stored_bytes": "stored_bytes",
    "peak_connections": "connections",
}


def breached(used: int, limit: int | None) -> bool:
    """A limit is breached when the use is over it; a null limit is none."""
    return limit is not None and used > limit


def breaches(measures: dict[str, int], limits: dict[str, int | None]) -> list[dict]:
    """The breached limits as `tenant.throttled` carries them, by limit name (the usage job's
    shape and order): [{"limit", "used", "limit_value"}]."""
    return [
        {"limit": limit, "used": measures[measure], "limit_value": limits.get(limit)}
        for limit, measure in sorted(USAGE_LIMITS.items())
        if breached(measures[measure], limits.get(limit))
    ]
