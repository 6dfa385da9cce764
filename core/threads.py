"""Thread pools that live as long as their process: one per name, made after a fork and never
inherited (a forked child has none of its parent's threads, only their bookkeeping)."""
import os
import threading
from concurrent.futures import ThreadPoolExecutor

_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}
_lock = threading.Lock()


def process_pool(name: str, max_workers: int) -> ThreadPoolExecutor:
    """This process's pool `name` (its threads named after it), made on first use."""
    with _lock:
        made = _pools.get(name)
        if made is None or made[0] != os.getpid():
            made = _pools[name] = (os.getpid(), ThreadPoolExecutor(
                max_workers=max_workers, thread_name_prefix=name))
        return made[1]
