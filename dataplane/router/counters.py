"""Delivery counters kept per router, per address node and per link (qdrouterd's names)."""


class Counters:
    __slots__ = ("ingress", "egress", "bytes_in", "bytes_out", "accepted", "rejected", "released",
                 "modified", "presettled", "dropped_presettled")

    def __init__(self):
        self.ingress = 0
        self.egress = 0
        self.bytes_in = 0  # encoded message bytes, for usage metering (a MaaS extension)
        self.bytes_out = 0
        self.accepted = 0
        self.rejected = 0
        self.released = 0
        self.modified = 0
        self.presettled = 0
        self.dropped_presettled = 0
