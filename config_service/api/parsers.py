"""The API's request parsers: JSON and YAML (an EnMasse manifest can be POSTed as it is), both
bounded by `config_service.safe_load` (size, nesting, aliases, duplicate keys, ...)."""
from rest_framework.parsers import BaseParser

from ..safe_load import load_json, load_yaml, read_bounded


class JSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        return load_json(read_bounded(stream))


class YAMLParser(BaseParser):
    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        return load_yaml(read_bounded(stream))


class XYAMLParser(YAMLParser):
    media_type = "application/x-yaml"


class TextYAMLParser(YAMLParser):
    media_type = "text/yaml"


class MergePatchParser(JSONParser):
    """RFC 7386's media type: the views that take PATCH read it as JSON, and merge it."""

    media_type = "application/merge-patch+json"


# The parsers of views with PATCH: the defaults (settings) and the merge patch type.
PARSERS = [JSONParser, MergePatchParser, YAMLParser, XYAMLParser, TextYAMLParser]
