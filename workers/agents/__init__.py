"""Per-address-space agents: level-triggered reconcilers of routers and brokers."""
