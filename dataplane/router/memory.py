"""The router's memory after large messages. glibc keeps what a process frees in its heap, and
raises its threshold for mapping large allocations apart each time one is freed, so a router
that carried a few large messages stayed hundreds of megabytes larger for good. At start the
threshold is fixed (allocations of a megabyte or more are mapped apart, and unmapped when
freed), and a second after a large message the heap's free top is given back (`malloc_trim`)."""
import ctypes
import ctypes.util
import logging

logger = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)
LARGE = 1 << 20  # bytes: an allocation this large is mapped apart; a message this large trims

_libc = None


def _c():
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        _libc = ctypes.CDLL(name) if name else False
    return _libc


def bound_large_allocations(threshold: int = LARGE) -> bool:
    """Fixes glibc's threshold for mapping allocations apart; False where there is no glibc."""
    libc = _c()
    if not libc or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))


def trim() -> None:
    """Gives the heap's free memory back to the system."""
    libc = _c()
    if libc and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
