"""Plans in a tenant's words: what an address space plan holds (routers, brokers) and how many
addresses of its plans fit in it, from the same credits the scheduler places by."""
import math

# Above this many router or broker instances a plan is, for a tenant, without limit.
PRACTICALLY_UNLIMITED = 1000


def fits(limits: dict, resources: dict) -> int | None:
    """How many addresses costing `resources` a space with `limits` holds (None: no bound),
    counting each kind of credit and their aggregate."""
    bounds = [math.floor(limits[kind] / cost + 1e-9) for kind, cost in resources.items()
              if cost and kind in limits]
    total = sum(cost for cost in resources.values() if cost)
    if total and "aggregate" in limits:
        bounds.append(math.floor(limits["aggregate"] / total + 1e-9))
    return min(bounds) if bounds else None


def _instances(count: float, noun: str) -> str:
    n = math.floor(count + 1e-9)
    return f"{n} {noun}" + ("" if n == 1 else "s")


def describe_space_plan(plan, address_plans) -> str:
    """E.g. "Standard small: 1 router and 1 broker; holds 100 small queues, 10 medium queues
    or 1,000 small anycast addresses"."""
    limits = plan.resource_limits or {}
    name = plan.display_name or plan.name
    if plan.short_description:
        name = f"{name} ({plan.short_description})"
    parts = [f"{_instances(limits[k], k)}" for k in ("router", "broker") if k in limits]
    if any(limits.get(k, 0) >= PRACTICALLY_UNLIMITED for k in ("router", "broker")):
        return f"{name}: as many routers and brokers as needed; addresses up to your " \
               "tenant's quota"
    size = " and ".join(parts) or "no router or broker limit"
    examples = []
    for ap in sorted(address_plans, key=lambda p: p.display_order):
        n = fits(limits, ap.resources or {})
        if not n or n >= PRACTICALLY_UNLIMITED * 100:  # none fits, or no bound worth saying
            continue
        label = (ap.display_name or ap.name).split(" (")[0].lower()
        examples.append((ap.address_type, f"{n:,} {label}{'' if n == 1 else 's'}"))
    # A few examples a tenant can picture: the first three queue sizes and one anycast.
    chosen = [text for kind, text in examples if kind == "queue"][:3]
    chosen += [text for kind, text in examples if kind == "anycast"][:1]
    if not chosen and examples:
        chosen = [text for _, text in examples[:3]]
    if chosen:
        holds = ", ".join(chosen[:-1]) + (" or " if len(chosen) > 1 else "") + chosen[-1]
        return f"{name}: {size}; holds {holds}"
    return f"{name}: {size}; queues and topics up to your tenant's quota"
