"""The router agent: configures the routers of standard spaces over AMQP management (`agent`),
from the entities a space should have (`desired`); `watch` restores a router that restarted
empty, `certificates` makes the router's TLS certificate on one machine."""
