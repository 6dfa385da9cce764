"""What the data plane asks of the control plane, as one small interface: a login checked, and
the gateway's retained messages, persistent sessions and durable subscriptions.

The processes of this package import no Django and no app; whoever starts one hands it an
implementation (`maas/bindings.py` reads and writes the control plane's database), so each can
be read and tested alone, and replaced without the Django apps.
"""
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Identity:
    """Whom a login names, as routers' vhost policies and logs know it."""

    sub: str  # the user id the router uses (its policy and logs)
    preferred_username: str
    # pattern -> send/recv; None (MaaS's choice): the router's vhost policy decides alone
    address_authz: dict[str, list[str]] | None = None


# A login and its password -> the identity, or None when refused. It may block (a database
# read); the auth service calls it off its event loop. It may also have `cached(login,
# password)`, which never blocks: the identity of a login it verified before and still trusts,
# else None; the auth service asks that first, on its loop.
Verifier = Callable[[str, str], Identity | None]


@dataclass(frozen=True)
class Retained:
    """The last retained MQTT message of a topic of a space."""

    topic: str
    payload: bytes
    qos: int


class GatewayStore(Protocol):
    """The gateway's view of the control plane, per space (`vhost` is `<tenant>.<space>`).
    Every method may block; the gateway calls them in worker threads."""

    def addresses(self, vhost: str) -> dict[str, str]:
        """The space's address names and their types; empty for no such standard space."""

    def router_of(self, vhost: str, default: tuple[str, int]) -> tuple[str, int]:
        """Where the space's router takes AMQP clients, `default` where one router serves all."""

    def certificate(self, host: str) -> tuple[str, str] | None:
        """(chain PEM, key PEM) of the space endpoint whose host name is `host`
        (spec.endpoints), or None: the listener's own certificate. Called for a TLS client's
        SNI name (dataplane/server_names.py)."""

    def restoring(self, vhost: str) -> bool:
        """Whether the space's router configuration is being restored (its router restarted
        without it): a login refused meanwhile is a transient failure."""

    def save_retained(self, vhost: str, topic: str, payload: bytes, qos: int) -> None:
        """Keeps the topic's retained message; an empty payload removes it."""

    def load_retained(self, vhost: str, topic_filter: str) -> list[Retained]:
        """The retained messages of the topics the filter matches, by topic."""

    def load_session(self, vhost: str, client_id: str) -> dict | None:
        """A persistent session's topic filters and their QoS, or None."""

    def save_session(self, vhost: str, client_id: str, subscriptions: dict) -> None: ...

    def ensure_subscription(self, vhost: str, topic: str, name: str, actor: str) -> None:
        """The durable subscription address `name` on `topic`, made if missing."""

    def drop_subscriptions(self, vhost: str, client_id: str, actor: str,
                           names: list[str] | None = None) -> None:
        """Deletes the named durable subscriptions of a client (with None: all, and its
        session)."""
