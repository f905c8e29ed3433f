"""Payload fields shared by the dead-letter and retry-queue endpoints.

A payload crosses the API twice: exactly, as base64 (any bytes survive JSON), and
as the same person-readable view the pages show (pretty JSON, text or a hex dump).
"""

from __future__ import annotations

import base64

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from console.archive.payloads import payload_view


@extend_schema_field(OpenApiTypes.BYTE)
class Base64PayloadField(serializers.Field):
    def __init__(self, **kwargs) -> None:
        kwargs["read_only"] = True
        super().__init__(**kwargs)

    def to_representation(self, value) -> str:
        return base64.b64encode(bytes(value)).decode("ascii")


class PayloadViewSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["json", "text", "binary"],
                                   help_text="How the payload reads: JSON, text or binary (hex).")
    text = serializers.CharField(help_text="Pretty JSON, the text, or a hex dump for binary.")
    size = serializers.IntegerField(help_text="Payload size in bytes.")
    truncated = serializers.BooleanField(help_text="True if `text` shows only the start.")


@extend_schema_field(PayloadViewSerializer)
class PayloadDisplayField(serializers.Field):
    """The page's view of a payload, computed from the raw bytes."""

    def __init__(self, **kwargs) -> None:
        kwargs["read_only"] = True
        super().__init__(**kwargs)

    def to_representation(self, value) -> dict:
        return PayloadViewSerializer(payload_view(bytes(value))).data
