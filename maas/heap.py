"""Keeps Python's cyclic garbage collector off what a long-running process made at start-up
(modules, settings, models, URL patterns, tasks): a full collection walked all of it, about
120,000 objects, 70-115 ms of one core on a two-core machine, about once in 400 API creates
and every five `/metrics` scrapes at 100k, and the request it fell in waited that long.
Frozen, a full collection walks what requests made since: about 5 ms (docs/scale.md,
"Garbage collection")."""
import gc


def freeze_startup_heap() -> None:
    """Collects what start-up left behind, then moves everything alive into the permanent
    generation, which collections skip (it is still freed by reference counting)."""
    gc.collect()
    gc.freeze()
