"""Server-side SASL PLAIN for proton through its pluggable SASL interface (sasl_plugin.h).

The proton wheel is built without Cyrus SASL, and its built-in server only offers ANONYMOUS
and EXTERNAL. Its plugin API (`pnx_sasl_set_implementation` and helpers) is exported from the
same shared library, so this module supplies a tiny per-transport SASL implementation with
ctypes: it offers the configured mechanisms and calls a Python verifier for PLAIN. Proton still
does all the SASL framing; we only make the decision.
"""

import ctypes
import logging
from collections.abc import Callable

import cproton_ffi
from cproton_ffi import ffi

logger = logging.getLogger(__name__)

_lib = ctypes.CDLL(cproton_ffi.__file__)

# enum pnx_sasl_state
_SASL_POSTED_MECHANISMS = 2
_SASL_POSTED_OUTCOME = 7


class _PnBytes(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("start", ctypes.c_void_p)]


_T = ctypes.c_void_p
_FREE = ctypes.CFUNCTYPE(None, _T)
_LIST = ctypes.CFUNCTYPE(ctypes.c_void_p, _T)
_BOOL_T = ctypes.CFUNCTYPE(ctypes.c_bool, _T)
_VOID_T = ctypes.CFUNCTYPE(None, _T)
_INIT = ctypes.CFUNCTYPE(None, _T, ctypes.c_char_p, ctypes.POINTER(_PnBytes))
_RESP = ctypes.CFUNCTYPE(None, _T, ctypes.POINTER(_PnBytes))
_MECHS = ctypes.CFUNCTYPE(ctypes.c_bool, _T, ctypes.c_char_p)
_SSIZE_T = ctypes.CFUNCTYPE(ctypes.c_ssize_t, _T)
_CODE = ctypes.CFUNCTYPE(ctypes.c_ssize_t, _T, _PnBytes, ctypes.POINTER(_PnBytes))


class _Impl(ctypes.Structure):
    _fields_ = [
        ("free", _FREE),
        ("list_mechanisms", _LIST),
        ("init_server", _BOOL_T),
        ("init_client", _BOOL_T),
        ("prepare_write", _VOID_T),
        ("process_init", _INIT),
        ("process_response", _RESP),
        ("process_mechanisms", _MECHS),
        ("process_challenge", _RESP),
        ("process_outcome", _RESP),
        ("can_encrypt", _BOOL_T),
        ("max_encrypt_size", _SSIZE_T),
        ("encode", _CODE),
        ("decode", _CODE),
    ]


_lib.pnx_sasl_set_desired_state.argtypes = [_T, ctypes.c_int]
_lib.pnx_sasl_set_succeeded.argtypes = [_T, ctypes.c_char_p, ctypes.c_char_p]
_lib.pnx_sasl_set_failed.argtypes = [_T]
_lib.pnx_sasl_set_implementation.argtypes = [_T, ctypes.c_void_p, ctypes.c_void_p]

# Verifier: (mechanism, authzid, authcid, password) -> authenticated user name or None
Verifier = Callable[[str, str, str, str], str | None]


class _Session:
    __slots__ = ("mechs", "verifier", "user")

    def __init__(self, mechs: bytes, verifier: Verifier):
        self.mechs = ctypes.create_string_buffer(mechs)
        self.verifier = verifier
        self.user: str | None = None


# transport address -> _Session; the plugin callbacks only receive the transport pointer
_sessions: dict[int, _Session] = {}


def _free(t):
    # Called by proton when the transport goes away; forget our per-transport state.
    _sessions.pop(t, None)


def _list_mechanisms(t):
    s = _sessions.get(t)
    return ctypes.addressof(s.mechs) if s else None


def _init_server(t):
    _lib.pnx_sasl_set_desired_state(t, _SASL_POSTED_MECHANISMS)
    return True


def _false(t):
    return False


def _noop(t, *args):
    return None


def _process_init(t, mechanism, recv):
    s = _sessions.get(t)
    mech = (mechanism or b"").decode("ascii", "replace")
    user = None
    if s is not None and mech in s.mechs.value.decode().split():
        data = b""
        if recv and recv.contents.size:
            data = ctypes.string_at(recv.contents.start, recv.contents.size)
        try:
            if mech == "PLAIN":
                authzid, authcid, password = data.split(b"\0", 2)
                user = s.verifier(mech, authzid.decode(), authcid.decode(), password.decode())
            elif mech == "ANONYMOUS":
                user = s.verifier(mech, "", "anonymous", "")
        except (ValueError, UnicodeDecodeError):
            user = None
        except Exception:  # a verifier bug must not unwind through C
            logger.exception("sasl.verifier_failed")
            user = None
    if user is not None:
        s.user = user
        _lib.pnx_sasl_set_succeeded(t, user.encode(), None)
    else:
        logger.info("sasl.auth_failed", extra={"mechanism": mech})
        _lib.pnx_sasl_set_failed(t)
    _lib.pnx_sasl_set_desired_state(t, _SASL_POSTED_OUTCOME)


def _code(t, inb, out):
    return 0


def _ssize(t):
    return 0


_IMPL = _Impl(
    _FREE(_free),
    _LIST(_list_mechanisms),
    _BOOL_T(_init_server),
    _BOOL_T(_false),
    _VOID_T(_noop),
    _INIT(_process_init),
    _RESP(_noop),
    _MECHS(lambda t, m: False),
    _RESP(_noop),
    _RESP(_noop),
    _BOOL_T(_false),
    _SSIZE_T(_ssize),
    _CODE(_code),
    _CODE(_code),
)


def transport_address(transport) -> int:
    return int(ffi.cast("uintptr_t", transport))


def install(transport, mechanisms: str, verifier: Verifier) -> None:
    """Make `transport` (a server transport whose pn_sasl exists) use our verifier."""
    addr = transport_address(transport)
    _sessions[addr] = _Session(mechanisms.encode("ascii"), verifier)
    _lib.pnx_sasl_set_implementation(addr, ctypes.addressof(_IMPL), None)


def authenticated_user(transport) -> str | None:
    s = _sessions.get(transport_address(transport))
    return s.user if s else None


def forget(transport) -> None:
    _sessions.pop(transport_address(transport), None)
