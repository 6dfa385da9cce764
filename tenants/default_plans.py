"""EnMasse's example plans (templates/example-plans), shipped as MaaS's defaults."""

# name, type, router, broker, partitions, display name
ADDRESS_PLANS = [
    ("standard-small-anycast", "anycast", 0.001, None, 1, "Small anycast"),
    ("standard-medium-anycast", "anycast", 0.01, None, 1, "Medium anycast"),
    ("standard-large-anycast", "anycast", 0.1, None, 1, "Large anycast"),
    ("standard-small-multicast", "multicast", 0.001, None, 1, "Small multicast"),
    ("standard-medium-multicast", "multicast", 0.01, None, 1, "Medium multicast"),
    ("standard-large-multicast", "multicast", 0.1, None, 1, "Large multicast"),
    ("standard-small-queue", "queue", 0.001, 0.01, 1, "Small queue"),
    ("standard-medium-queue", "queue", 0.01, 0.1, 1, "Medium queue"),
    ("standard-large-queue", "queue", 0.1, 1.0, 1, "Large queue (dedicated broker)"),
    ("standard-xlarge-queue", "queue", 0.2, 2.0, 1, "X-large queue (backed by 2 brokers)"),
    ("standard-small-partitioned-queue", "queue", 0.001, 0.01, 3, "Small HA queue"),
    ("standard-medium-partitioned-queue", "queue", 0.01, 0.1, 3, "Medium HA queue"),
    ("standard-large-partitioned-queue", "queue", 0.1, 1.0, 3, "Large HA queue"),
    ("standard-small-topic", "topic", 0.001, 0.01, 1, "Small topic"),
    ("standard-medium-topic", "topic", 0.01, 0.1, 1, "Medium topic"),
    ("standard-large-topic", "topic", 0.1, 1.0, 1, "Large topic (dedicated broker)"),
    ("standard-xlarge-topic", "topic", 0.2, 2.0, 1, "X-large topic (backed by 2 brokers)"),
    ("standard-small-subscription", "subscription", 0.001, 0.01, 1, "Small subscription"),
    ("standard-medium-subscription", "subscription", 0.01, 0.1, 1, "Medium subscription"),
    ("standard-large-subscription", "subscription", 0.1, 1.0, 1, "Large subscription"),
    ("standard-deadletter", "deadletter", None, None, 1, "Deadletter"),
    ("brokered-queue", "queue", None, 0.0, 1, "Brokered queue"),
    ("brokered-topic", "topic", None, 0.0, 1, "Brokered topic"),
    ("brokered-deadletter", "deadletter", None, None, 1, "Brokered deadletter"),
]

# name, type, resourceLimits, infraConfigRef, address plan name prefixes
SPACE_PLANS = [
    ("standard-small", "standard", {"router": 1.0, "broker": 1.0, "aggregate": 2.0},
     "default-minimal", "standard-"),
    ("standard-medium", "standard", {"router": 3.0, "broker": 3.0, "aggregate": 6.0},
     "default", "standard-"),
    ("standard-unlimited", "standard",
     {"router": 10000.0, "broker": 10000.0, "aggregate": 10000.0}, "default", "standard-"),
    ("brokered-single-broker", "brokered", {"broker": 1.9}, "default", "brokered-"),
]


def install(AddressPlan, AddressSpacePlan) -> None:  # noqa: N803 - historical models
    """Creates the default plans that do not exist yet; operators' edits are kept."""
    plans = {}
    for order, (name, kind, router, broker, partitions, display) in enumerate(ADDRESS_PLANS):
        resources = {k: v for k, v in (("router", router), ("broker", broker)) if v is not None}
        plans[name], _ = AddressPlan.objects.get_or_create(
            name=name,
            defaults={"address_type": kind, "resources": resources, "partitions": partitions,
                      "display_name": display, "display_order": order},
        )
    for order, (name, kind, limits, infra, prefix) in enumerate(SPACE_PLANS):
        plan, created = AddressSpacePlan.objects.get_or_create(
            name=name,
            defaults={"address_space_type": kind, "resource_limits": limits,
                      "infra_config_ref": infra, "display_order": order,
                      "display_name": name.replace("-", " ").capitalize()},
        )
        if created:
            plan.address_plans.set([p for n, p in plans.items() if n.startswith(prefix)])
