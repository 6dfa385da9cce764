"""Limits on untrusted input (API bodies, portal uploads, URLs): one place for every bound."""
import re

from .errors import Invalid

# A manifest is a few hundred bytes; a bulk upload of thousands of addresses stays well under.
MAX_BODY_BYTES = 1 << 20
# EnMasse manifests nest five or six levels; 32 leaves room and stops stack-eating bodies.
MAX_DEPTH = 32
# Echoed in errors: a refused key is named, but a megabyte-long one is not sent back whole.
MAX_KEY_IN_FIELD = 100
MAX_DISPLAY_NAME = 200  # Tenant.name and plans' display names

# C0 controls except tab, line feed and carriage return, and DEL: PostgreSQL refuses NUL in
# text, and none of the others belongs in a name, an address or a display name.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def has_control(text: str) -> bool:
    return CONTROL.search(text) is not None


def printable(text: str) -> str:
    """`text` with control characters escaped, fit to be named in an error or a log."""
    text = CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return text if len(text) <= MAX_KEY_IN_FIELD else text[:MAX_KEY_IN_FIELD] + "..."


def display_name(value, field: str = "spec.displayName") -> str:
    """A tenant's display name: text of at most 200 characters (Tenant.name)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Invalid("must be a string", field)
    if len(value) > MAX_DISPLAY_NAME or has_control(value):
        raise Invalid(f"use at most {MAX_DISPLAY_NAME} characters and no control characters",
                      field)
    return value
