"""Bounded loading of untrusted JSON and YAML (API bodies, portal uploads).

Refused, each with a 400 naming the field: YAML anchors and aliases (a 600-byte alias bomb
expands to gigabytes), nesting deeper than `limits.MAX_DEPTH`, duplicate keys (silently "last
wins" otherwise), non-string keys, non-finite numbers, control characters in any key or string,
and anything that is not plain JSON data (YAML timestamps stay the strings they were written
as). A body over `limits.MAX_BODY_BYTES` is refused with 413 before it is parsed.
"""
import json
import math

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, ScalarNode
from yaml.resolver import Resolver

from core.errors import Invalid, TooLarge
from core.limits import MAX_BODY_BYTES, MAX_DEPTH, has_control, printable


def read_bounded(stream, limit: int = MAX_BODY_BYTES) -> bytes:
    """At most `limit` bytes of `stream`; one byte more is read only to tell it is too big."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"the body exceeds {limit} bytes", "body")
    return data


def field(path) -> str:
    """`spec.authorization[0].addresses` from ("spec", "authorization", 0, "addresses")."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + printable(str(part))
    return out or "body"


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Invalid(f"the body is not UTF-8: {exc}", "body") from None


class _Mapping(dict):
    """A parsed object that remembers its first duplicate key, for `check` to name it."""

    duplicate = None


# JSON ----------------------------------------------------------------------------------------

def _json_object(pairs) -> _Mapping:
    obj = _Mapping()
    for key, value in pairs:
        if key in obj and obj.duplicate is None:
            obj.duplicate = key
        obj[key] = value
    return obj


def load_json(data: bytes):
    text = _text(data)
    try:
        # NaN, Infinity and 1e999 all parse to floats that `check` refuses with their path.
        value = json.loads(text, object_pairs_hook=_json_object)
    except RecursionError:
        raise Invalid(f"the body is nested deeper than {MAX_DEPTH} levels", "body") from None
    except ValueError as exc:  # JSONDecodeError, and integers beyond Python's digit limit
        raise Invalid(f"JSON parse error: {exc}", "body") from None
    return check(value)


# YAML ----------------------------------------------------------------------------------------

class _BoundedComposer(Composer):
    """Refuses aliases, anchors, collections as keys and deep nesting while composing, so an
    alias bomb or a deeply nested body is refused before it costs memory or stack."""

    def __init__(self):
        super().__init__()
        self._path: list = []

    def compose_node(self, parent, index):
        event = self.peek_event()
        # For a mapping value `index` is its key node, for a list item its position; None for
        # the document and for a key.
        part = index.value if isinstance(index, ScalarNode) else index
        path = self._path if part is None else [*self._path, part]
        if isinstance(event, AliasEvent) or event.anchor is not None:
            raise Invalid("YAML anchors and aliases are not allowed", field(path))
        if not isinstance(event, MappingStartEvent | SequenceStartEvent):
            return super().compose_node(parent, index)
        if isinstance(parent, MappingNode) and index is None:
            raise Invalid("keys must be strings, not lists or objects", field(path))
        if len(path) >= MAX_DEPTH:
            raise Invalid(f"nested deeper than {MAX_DEPTH} levels", field(path))
        outer, self._path = self._path, path
        try:
            return super().compose_node(parent, index)
        finally:
            self._path = outer


class _StrictConstructor(SafeConstructor):
    """Safe constructors, with duplicate keys remembered and timestamps kept as text."""

    def construct_yaml_map(self, node):
        data = _Mapping()
        yield data
        # No merge keys (`<<`): without aliases they are pointless, and they override silently.
        for key_node, value_node in node.value:
            key = self.construct_object(key_node)
            if key in data and data.duplicate is None:
                data.duplicate = key
            data[key] = self.construct_object(value_node)

    def construct_yaml_timestamp(self, node):
        return self.construct_scalar(node)


_StrictConstructor.add_constructor("tag:yaml.org,2002:map", _StrictConstructor.construct_yaml_map)
_StrictConstructor.add_constructor("tag:yaml.org,2002:timestamp",
                                   _StrictConstructor.construct_yaml_timestamp)

try:  # libyaml's parser gives the same events as PyYAML's, many times faster
    from yaml._yaml import CParser as _Parser

    _READER_AND_SCANNER: tuple = ()
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser as _Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    _READER_AND_SCANNER = (Reader, Scanner)


class BoundedLoader(_BoundedComposer, _Parser, *_READER_AND_SCANNER, _StrictConstructor,
                    Resolver):
    """A safe YAML loader for untrusted text (the composer's methods win over libyaml's)."""

    def __init__(self, stream):
        if _READER_AND_SCANNER:  # pragma: no cover
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            _Parser.__init__(self)
        else:
            _Parser.__init__(self, stream)
        _BoundedComposer.__init__(self)
        _StrictConstructor.__init__(self)
        Resolver.__init__(self)


def _yaml(run):
    try:
        return run()
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):
            # libyaml (PyYAML 6.0.3+) stops at 1,000 levels while scanning, before the
            # composer could say where: the same answer as ours, for the whole body.
            raise Invalid(f"the body is nested deeper than {MAX_DEPTH} levels", "body") from None
        raise Invalid(f"YAML parse error: {exc}", "body") from None
    except ValueError as exc:  # integers beyond Python's digit limit
        raise Invalid(f"YAML value error: {exc}", "body") from None


def load_yaml(data: bytes):
    """The one document of a YAML body."""
    loader = BoundedLoader(_text(data))
    try:
        return check(_yaml(loader.get_single_data))
    finally:
        loader.dispose()


def load_yaml_all(data: bytes) -> list:
    """Every document of a YAML file (the portal's bulk upload); empty documents left out."""
    loader = BoundedLoader(_text(data))

    def documents():
        out = []
        while loader.check_data():
            out.append(loader.get_data())
        return out

    try:
        docs = _yaml(documents)
    finally:
        loader.dispose()
    return [check(doc, (f"documents[{i}]",)) for i, doc in enumerate(docs) if doc is not None]


# Both ----------------------------------------------------------------------------------------

def check(value, path: tuple = (), depth: int = 1):
    """`value` if it is plain, bounded JSON data; else Invalid naming the first bad field."""
    if isinstance(value, dict | list) and depth > MAX_DEPTH:
        raise Invalid(f"nested deeper than {MAX_DEPTH} levels", field(path))
    if isinstance(value, dict):
        if getattr(value, "duplicate", None) is not None:
            raise Invalid("duplicate key", field((*path, value.duplicate)))
        for key, item in value.items():
            if not isinstance(key, str):
                raise Invalid("keys must be strings", field((*path, str(key))))
            if has_control(key):
                raise Invalid("control characters are not allowed in keys", field((*path, key)))
            check(item, (*path, key), depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check(item, (*path, i), depth + 1)
    elif isinstance(value, str):
        if has_control(value):
            raise Invalid("control characters (such as NUL) are not allowed", field(path))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise Invalid("must be a finite number", field(path))
    elif not (value is None or isinstance(value, bool | int)):
        raise Invalid("only strings, numbers, booleans, null, lists and objects are allowed",
                      field(path))
    return value
