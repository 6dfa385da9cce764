"""Address matching as qdrouterd does it: token prefixes and `*`/`#` patterns.

Tokens are separated by `.` or `/`. A prefix matches the address itself or the address
followed by a separator (so prefix `q1` does not match `q10`). In a pattern `*` matches one
token and `#` zero or more. Policy source/target lists use qdrouterd's simpler form: `*`
alone matches everything and a trailing `*` is a string prefix.
"""

import re
from functools import lru_cache

_SEPARATORS = "./"


def prefix_matches(prefix: str, address: str) -> bool:
    if not address.startswith(prefix):
        return False
    return len(address) == len(prefix) or address[len(prefix)] in _SEPARATORS or prefix == ""


@lru_cache(maxsize=4096)
def _pattern_regex(pattern: str) -> re.Pattern:
    out = []
    tokens = re.split(r"[./]", pattern)
    for i, tok in enumerate(tokens):
        sep = "" if i == 0 else "[./]"
        if tok == "#":
            # zero or more tokens, swallowing the separator before them
            out.append(f"(?:{sep}[^./]+)*" if i else "(?:[^./]+(?:[./][^./]+)*)?")
        elif tok == "*":
            out.append(sep + "[^./]+")
        else:
            out.append(sep + re.escape(tok))
    return re.compile("^" + "".join(out) + "$")


def pattern_matches(pattern: str, address: str) -> bool:
    return _pattern_regex(pattern).match(address) is not None


def best_match(entities, address: str, exact_pattern_first: bool = False) -> dict | None:
    """qdrouterd's precedence among address or link-route configurations: the longest
    matching prefix, else the first matching pattern (`exact_pattern_first`: a pattern equal
    to the address wins over everything, as for link routes)."""
    best, best_len = None, -1
    for ent in entities:
        if exact_pattern_first and ent.get("pattern") == address:
            return ent
        if ent.get("prefix") is not None:
            if prefix_matches(ent["prefix"], address) and len(ent["prefix"]) > best_len:
                best, best_len = ent, len(ent["prefix"])
        elif pattern_matches(ent["pattern"], address) and best_len < 0:
            best, best_len = ent, 0
    return best


def normalise_prefix(prefix: str) -> str:
    """qdrouterd drops a leading `/` from configured prefixes."""
    return prefix[1:] if prefix.startswith("/") else prefix


def policy_list_matches(spec: str, address: str) -> bool:
    """Match a comma-separated qdrouterd policy list (`sources`, `targets`)."""
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        if item == "*" or item == address:
            return True
        if item.endswith("*") and address.startswith(item[:-1]):
            return True
    return False
