"""Message forwarding: address nodes, credit propagation and settlement, the hot path.

A node is one (qualified address, phase). Producers are the router's receiving links into it
(client senders, autoLink `in`), consumers its sending links out of it (client receivers,
autoLink `out`). Bodies travel as raw encoded bytes; nothing is decoded. Unsettled deliveries
stay unsettled upstream until the downstream outcome arrives, which is what makes the waypoint
(queue) path lossless.
"""

import logging
from collections import deque

from cproton import (
    pn_condition_get_description,
    pn_condition_get_name,
    pn_condition_set_description,
    pn_condition_set_name,
)
from cproton_ffi import ffi
from cproton_ffi import lib as L

from .counters import Counters

logger = logging.getLogger(__name__)

ACCEPTED = L.PN_ACCEPTED
REJECTED = L.PN_REJECTED
RELEASED = L.PN_RELEASED
MODIFIED = L.PN_MODIFIED
_TERMINAL = {ACCEPTED: "accepted", REJECTED: "rejected", RELEASED: "released",
             MODIFIED: "modified"}

WINDOW = 250  # credit granted to a producer while somebody downstream can take messages
_LOW = WINDOW // 2
MULTICAST_QUEUE_LIMIT = 1000  # copies waiting for one consumer's credit; more are dropped
KEEP = 1 << 20  # bytes of the shared receive buffer at most (a message larger gets its own)


class LinkState:
    """The router's end of one link."""

    __slots__ = ("pn", "conn", "sender", "kind", "node", "address", "peer", "unsettled",
                 "tags", "closed", "identity", "name", "autolink", "counts", "session",
                 "waiting", "__weakref__")

    _ids = 0

    def __init__(self, pn, conn, sender: bool, kind: str, address: str | None = None):
        LinkState._ids += 1
        self.identity = LinkState._ids
        self.pn = pn
        self.conn = conn
        self.sender = sender  # True when the router sends on it
        self.kind = kind  # client, mgmt, dynamic, autolink, route
        self.node = None
        self.address = address
        self.peer = None  # the other half of a link route
        self.unsettled: dict = {}  # receiver: in delivery -> out delivery; sender: out -> None
        self.tags = 0
        self.closed = False
        self.name = ""
        self.autolink = None
        self.session = None
        self.counts = Counters()
        self.waiting = None  # a multicast consumer's copies beyond its credit: (data, size)


class Node:
    __slots__ = ("key", "phase", "multicast", "consumers", "producers", "backlog", "rr",
                 "counts", "config", "container_links")

    def __init__(self, key: str, phase: int, multicast: bool, config=None,
                 counts: Counters | None = None):
        self.key = key
        self.phase = phase
        self.multicast = multicast
        self.consumers: list[LinkState] = []
        self.producers: list[LinkState] = []
        self.backlog: deque = deque()
        self.rr = 0
        self.counts = counts if counts is not None else Counters()
        self.config = config


class Forwarder:
    def __init__(self, counters: Counters, ledger=None):
        self.counts = counters  # router-wide
        self.ledger = ledger  # usage_ledger.UsageLedger: the counters of metered nodes
        self.nodes: dict[tuple[str, int], Node] = {}
        self.out2in: dict = {}  # out delivery -> [in delivery|None, in link, out link, node]
        self._buf = ffi.new("char[]", KEEP)
        self._bufsize = KEEP
        self._large = False  # the buffer now is a large message's own

    # -- nodes -------------------------------------------------------------------------------
    def node(self, key: str, phase: int, multicast: bool, config=None,
             metered: bool = True) -> Node:
        """The node of (key, phase), made if need be; a metered one counts into the usage
        ledger, whose entry outlives it (dynamic `$temp` nodes are not metered)."""
        node = self.nodes.get((key, phase))
        if node is None:
            counts = None
            if metered and self.ledger is not None:
                counts = self.ledger.attach(key, phase, multicast)
            node = self.nodes[(key, phase)] = Node(key, phase, multicast, config, counts)
        return node

    def drop_node_if_idle(self, node: Node) -> None:
        if not node.consumers and not node.producers and node.config is None:
            if self.nodes.get((node.key, node.phase)) is node:
                self.nodes.pop((node.key, node.phase))
                if self.ledger is not None:
                    self.ledger.detach(node.key, node.phase)

    def add_consumer(self, node: Node, ls: LinkState) -> None:
        ls.node = node
        node.consumers.append(ls)

    def add_producer(self, node: Node, ls: LinkState) -> None:
        ls.node = node
        node.producers.append(ls)
        self.replenish(ls)

    # -- credit ------------------------------------------------------------------------------
    def replenish(self, ls: LinkState) -> None:
        """Give a producer credit that downstream can absorb: what consumers can take now
        (less what already waits), at most WINDOW, in batches to spare flow frames."""
        if ls.closed or ls.peer is not None:
            return
        credit = L.pn_link_credit(ls.pn)
        if credit >= _LOW:
            return
        node = ls.node
        if node.multicast:
            want = WINDOW if node.consumers else 0
        else:
            avail = 0
            for c in node.consumers:
                avail += L.pn_link_credit(c.pn)
            want = min(WINDOW, avail - len(node.backlog))
        if want > credit and want - credit >= min(want, 32):
            L.pn_link_flow(ls.pn, want - credit)

    def on_consumer_flow(self, ls: LinkState) -> None:
        node = ls.node
        if node is None:
            return
        waiting = ls.waiting
        while waiting and L.pn_link_credit(ls.pn) > 0:
            data, n = waiting.popleft()
            self._send(ls, data, n, None, None, True, node)
        backlog = node.backlog
        while backlog and L.pn_link_credit(ls.pn) > 0:
            data, n, in_d, in_ls, settled = backlog.popleft()
            if not settled and in_ls.closed:
                continue  # nobody left upstream to tell the outcome to
            self._send(ls, data, n, in_d, in_ls, settled, node)
        for p in node.producers:
            self.replenish(p)
        if not backlog and not waiting and L.pn_link_get_drain(ls.pn):
            L.pn_link_drained(ls.pn)

    # -- incoming ----------------------------------------------------------------------------
    def receive(self, ls: LinkState, d) -> int:
        """Read a complete delivery into the shared buffer; returns its size. The buffer grows
        to the largest message up to KEEP bytes; a larger one gets a buffer of its own, freed
        once it is forwarded, so that one large message does not stay in memory for good."""
        n = L.pn_delivery_pending(d)
        if n > self._bufsize:
            self._buf = ffi.new("char[]", n)
            if n <= KEEP:
                self._bufsize = n
            else:
                self._large = True
        got = L.pn_link_recv(ls.pn, self._buf, n)
        L.pn_link_advance(ls.pn)
        return got

    def release_large(self) -> bool:
        """After a message read into a buffer of its own: the shared one again; True if so."""
        if not self._large:
            return False
        self._large = False
        self._buf = ffi.new("char[]", self._bufsize)
        return True

    def forward(self, ls: LinkState, d, n: int) -> None:
        node = ls.node
        settled = L.pn_delivery_settled(d)
        if settled:
            L.pn_delivery_settle(d)  # nothing to report upstream: free it now
            d = None
        counts = node.counts
        counts.ingress += 1
        counts.bytes_in += n
        self.counts.ingress += 1
        ls.counts.ingress += 1  # the link's deliveryCount
        if node.multicast:
            self._multicast(ls, node, d, n, settled)
        else:
            out = self._pick(node)
            if out is None:
                node.backlog.append((ffi.from_buffer(ffi.buffer(self._buf, n)[:]), n, d, ls,
                                     settled))
            else:
                self._send(out, self._buf, n, d, ls, settled, node)
        if L.pn_link_credit(ls.pn) < _LOW:
            self.replenish(ls)

    def _pick(self, node: Node):
        consumers = node.consumers
        count = len(consumers)
        for i in range(count):
            c = consumers[(node.rr + i) % count]
            if L.pn_link_credit(c.pn) > 0:
                node.rr = (node.rr + i + 1) % count
                return c
        return None

    def _multicast(self, ls: LinkState, node: Node, d, n: int, settled: bool) -> None:
        if not settled:
            L.pn_delivery_update(d, ACCEPTED)
            L.pn_delivery_settle(d)
            node.counts.accepted += 1
            self.counts.accepted += 1
        copy = None
        for c in node.consumers:
            if L.pn_link_credit(c.pn) > 0 and not c.waiting:
                self._send(c, self._buf, n, None, ls, True, node)
                continue
            # Beyond the receiver's credit a copy waits here, not in proton's link buffer: it
            # is sent, and counted as delivered (egress, metered), only within credit, and a
            # receiver that goes away takes its waiting copies with it uncounted.
            if c.waiting is None:
                c.waiting = deque()
            if len(c.waiting) >= MULTICAST_QUEUE_LIMIT:
                node.counts.dropped_presettled += 1
                self.counts.dropped_presettled += 1
                continue
            if copy is None:
                copy = ffi.from_buffer(ffi.buffer(self._buf, n)[:])
            c.waiting.append((copy, n))

    def _send(self, out: LinkState, data, n: int, in_d, in_ls: LinkState, settled, node) -> None:
        out.tags += 1
        tag = b"%x" % out.tags
        od = L.pn_delivery(out.pn, (len(tag), ffi.from_buffer(tag)))
        L.pn_link_send(out.pn, data, n)
        L.pn_link_advance(out.pn)
        node.counts.egress += 1
        node.counts.bytes_out += n
        self.counts.egress += 1
        out.counts.egress += 1
        if settled:
            L.pn_delivery_settle(od)
            node.counts.presettled += 1
            self.counts.presettled += 1
        else:
            self.out2in[od] = [in_d, in_ls, out, node]
            in_ls.unsettled[in_d] = od
            out.unsettled[od] = None

    # -- outcomes ----------------------------------------------------------------------------
    def on_outgoing_update(self, ls: LinkState, d) -> None:
        state = L.pn_delivery_remote_state(d)
        outcome = _TERMINAL.get(state)
        if outcome is None and not L.pn_delivery_settled(d):
            return
        entry = self.out2in.pop(d, None)
        ls.unsettled.pop(d, None)
        if outcome is None:
            state, outcome = ACCEPTED, "accepted"  # settled without an outcome
        if entry is not None:
            in_d, in_ls, _, node = entry
            setattr(node.counts, outcome, getattr(node.counts, outcome) + 1)
            if in_d is not None and not in_ls.closed:
                in_ls.unsettled.pop(in_d, None)
                L.pn_delivery_update(in_d, state)
                self._copy_disposition(d, in_d, state)
                L.pn_delivery_settle(in_d)
        setattr(self.counts, outcome, getattr(self.counts, outcome) + 1)
        setattr(ls.counts, outcome, getattr(ls.counts, outcome) + 1)
        L.pn_delivery_settle(d)

    @staticmethod
    def _copy_disposition(src, dst, state) -> None:
        remote = L.pn_delivery_remote(src)
        local = L.pn_delivery_local(dst)
        if state == MODIFIED:
            L.pn_disposition_set_failed(local, L.pn_disposition_is_failed(remote))
            L.pn_disposition_set_undeliverable(local, L.pn_disposition_is_undeliverable(remote))
        elif state == REJECTED:
            cond = L.pn_disposition_condition(remote)
            if L.pn_condition_is_set(cond):
                lc = L.pn_disposition_condition(local)
                pn_condition_set_name(lc, pn_condition_get_name(cond))
                desc = pn_condition_get_description(cond)
                if desc:
                    pn_condition_set_description(lc, desc)

    # -- detach ------------------------------------------------------------------------------
    def remove_link(self, ls: LinkState) -> None:
        """Forget a link that is going away; tell upstream what became of its deliveries."""
        ls.closed = True
        node = ls.node
        if ls.sender:
            for od in list(ls.unsettled):
                entry = self.out2in.pop(od, None)
                if entry and entry[0] is not None and not entry[1].closed:
                    # the consumer vanished before deciding: let the sender retry elsewhere
                    entry[1].unsettled.pop(entry[0], None)
                    L.pn_delivery_update(entry[0], RELEASED)
                    L.pn_delivery_settle(entry[0])
            ls.unsettled.clear()
            ls.waiting = None  # multicast copies it never had credit for: never delivered
            if node is not None and ls in node.consumers:
                node.consumers.remove(ls)
                if not node.consumers:
                    self._release_backlog(node)
        else:
            for od in ls.unsettled.values():
                entry = self.out2in.get(od)
                if entry is not None:
                    entry[0] = None  # the incoming delivery dies with its link
            ls.unsettled.clear()
            if node is not None and ls in node.producers:
                node.producers.remove(ls)
        if node is not None:
            self.drop_node_if_idle(node)

    def _release_backlog(self, node: Node) -> None:
        while node.backlog:
            _, _, in_d, in_ls, settled = node.backlog.popleft()
            if settled:
                node.counts.dropped_presettled += 1
                self.counts.dropped_presettled += 1
            elif not in_ls.closed:
                L.pn_delivery_update(in_d, RELEASED)
                L.pn_delivery_settle(in_d)
                node.counts.released += 1
                self.counts.released += 1

    def forward_pair(self, ls: LinkState, d, n: int) -> None:
        """Link-routed delivery: straight to the other half of the routed link."""
        settled = L.pn_delivery_settled(d)
        if settled:
            L.pn_delivery_settle(d)
            d = None
        node = ls.node
        node.counts.ingress += 1
        node.counts.bytes_in += n
        self.counts.ingress += 1
        ls.counts.ingress += 1
        self._send(ls.peer, self._buf, n, d, ls, settled, node)

    def inject(self, node: Node, data: bytes) -> None:
        """Send a router-made message (a management reply) pre-settled to a node."""
        out = self._pick(node)
        buf = ffi.from_buffer(data)
        if out is None:
            if node.consumers:
                node.backlog.append((buf, len(data), None, None, True))
            return
        self._send(out, buf, len(data), None, None, True, node)
