"""Request parsers of every API view (the default in settings.REST_FRAMEWORK)."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class NestingSafeJSONParser(JSONParser):
    """JSON bodies, where nesting too deep for Python's decoder is bad input (400), not a
    crash: a body of a hundred thousand "[" would otherwise end in a RecursionError."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError("JSON parse error - nested too deeply.") from exc
