"""Which bare names of a vhost are topics, read from the broker's management API for the
address rewriting (addresses.py): one listing of the vhost's exchanges, kept a few seconds and
read again at most once a second per vhost, however many clients attach unknown names."""
import asyncio
import base64
import json
import logging
import time
import urllib.error
import urllib.request
from urllib.parse import quote

from .addresses import TOPIC, Needs

logger = logging.getLogger("dataplane.vhost_relay")

TOPIC_TYPES = ("x-maas-topic", "topic")  # the storage controller's topic exchanges
FRESH = 10.0  # seconds a listing answers names it holds
RETRY = 1.0  # seconds before a name it lacks makes the vhost listed again


class Kinds:
    """The topics of each vhost, from `GET /api/exchanges/<vhost>`."""

    def __init__(self, api_url: str, user: str, password: str, timeout: float = 5.0):
        # a cluster's nodes, comma-separated: any answers for the cluster, tried in turn
        self.api_urls = [u.strip().rstrip("/") for u in api_url.split(",") if u.strip()]
        self.api_url = self.api_urls[0]
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.timeout = timeout
        self.topics: dict[str, tuple[float, frozenset]] = {}  # vhost -> (read at, names)
        self.reading: dict[str, asyncio.Future] = {}

    def kind(self, vhost: str | None, name: str) -> str | None:
        """`topic`, or None (a queue, a subscription, or nothing: the broker says which);
        raises `Needs` when the vhost must be listed first."""
        if vhost is None:
            return None
        read_at, names = self.topics.get(vhost, (None, frozenset()))
        age = time.monotonic() - read_at if read_at is not None else None
        if age is not None and (age < RETRY or (name in names and age < FRESH)):
            return TOPIC if name in names else None
        raise Needs(name)

    async def read(self, vhost: str) -> None:
        """Lists the vhost's exchanges (one listing at a time per vhost)."""
        if vhost in self.reading:
            await asyncio.shield(self.reading[vhost])
            return
        future = asyncio.get_running_loop().create_future()
        self.reading[vhost] = future
        try:
            names = await asyncio.to_thread(self._topics, vhost)
            self.topics[vhost] = (time.monotonic(), names)
        except (OSError, ValueError) as exc:  # unreachable, refused, garbled: keep what we had
            logger.warning("vhost_relay.kinds_unreadable", extra={"vhost": vhost,
                                                                   "error": str(exc)})
            _, names = self.topics.get(vhost, (None, frozenset()))
            self.topics[vhost] = (time.monotonic(), names)  # retried after RETRY, not at once
        finally:
            del self.reading[vhost]
            future.set_result(None)

    def _topics(self, vhost: str) -> frozenset:
        for i, api_url in enumerate(self.api_urls):
            url = (f"{api_url}/exchanges/{quote(vhost, safe='')}"
                   "?disable_stats=true&columns=name,type")
            request = urllib.request.Request(url, headers={"Authorization": self.auth})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    rows = json.load(response)
                break
            except urllib.error.HTTPError as exc:
                if exc.code == 404:  # no such vhost: nothing of it is a topic
                    return frozenset()
                raise
            except OSError:  # that node is gone: another of the cluster answers
                if i == len(self.api_urls) - 1:
                    raise
        # an exchange deleted while listed answers as an empty row ([]): it is no topic
        return frozenset(row["name"] for row in rows
                         if isinstance(row, dict) and row.get("type") in TOPIC_TYPES)
