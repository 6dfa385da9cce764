"""Embedded AMQP 1.0 router: a small Qpid Dispatch Router look-alike built on proton-c (via cffi).

It speaks qdrouterd's management protocol for the entity types the router agent uses, so the
agent can drive either router. No Django imports here: it runs as `python -m dataplane.router`.
"""
