"""The dead-letter archive over the API: browse with the page's filters, open one, discard.

Filters are validated by the very form the archive page uses (ArchiveFilterForm), so
the page and the API refuse the same input; here a malformed filter is a 400 with
the form's messages instead of an empty page.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from console.api.base import BAD_INPUT, NOT_FOUND, ApiViewSet, ArchivePagination
from console.api.payloads import Base64PayloadField, PayloadDisplayField
from console.archive import selectors, services
from console.archive.forms import ArchiveFilterForm
from console.archive.models import DeadLetter


class DeadLetterStateField(serializers.ChoiceField):
    def __init__(self, **kwargs) -> None:
        super().__init__(choices=DeadLetter.STATE_CHOICES, **kwargs)


class DeadLetterStateSchema(OpenApiSerializerFieldExtension):
    """Names the dead-letter states once (`DeadLetterState`) in the schema.

    Other apps also expose a field called `state` with other values (replay jobs);
    left to itself the generator would give ours a hashed name and warn.
    """

    target_class = DeadLetterStateField

    def get_name(self) -> str:
        return "DeadLetterState"

    def map_serializer_field(self, auto_schema, direction) -> dict:
        return {"type": "string", "enum": [value for value, _ in DeadLetter.STATE_CHOICES],
                "description": ", ".join(f"`{value}`: {label}" for value, label in DeadLetter.STATE_CHOICES)}


class DeadLetterSerializer(serializers.ModelSerializer):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)
    state = DeadLetterStateField(read_only=True)
    properties = serializers.DictField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = DeadLetter
        fields = [
            "id", "cluster", "cluster_name", "subscription", "source", "state", "state_changed_at",
            "state_reason", "retry_count", "origin_message_id", "broker_message_id",
            "first_failure_at", "last_failure_at", "collected_at", "payload_size",
            "payload_preview", "properties",
        ]
        read_only_fields = fields


class DeadLetterDetailSerializer(DeadLetterSerializer):
    payload = Base64PayloadField(help_text="The exact payload bytes, base64.")
    display = PayloadDisplayField(source="payload",
                                  help_text="The payload as the page shows it: pretty JSON, text or hex.")

    class Meta(DeadLetterSerializer.Meta):
        fields = [*DeadLetterSerializer.Meta.fields, "payload", "display"]
        read_only_fields = fields


class DiscardSerializer(serializers.Serializer):
    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1), min_length=1, max_length=10_000,
        help_text="Archive ids of the dead letters to discard.",
    )
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class DiscardResultSerializer(serializers.Serializer):
    requested = serializers.IntegerField(help_text="How many distinct ids were sent.")
    discarded = serializers.IntegerField(
        help_text="How many were discarded: only parked or failed letters are; unknown ids and "
        "letters in another state are left alone."
    )


def _form_errors(form) -> dict[str, list[str]]:
    return {
        ("non_field_errors" if field == "__all__" else field): [error["message"] for error in errors]
        for field, errors in form.errors.get_json_data().items()
    }


FILTER_PARAMETERS = [
    OpenApiParameter("cluster", int, description="Cluster id."),
    OpenApiParameter("subscription", str, description="Exact subscription name."),
    OpenApiParameter("state", str, enum=[value for value, _ in DeadLetter.STATE_CHOICES]),
    OpenApiParameter("text", str, description="Text in the payload's start, or an exact broker or "
                     "origin message id."),
    OpenApiParameter("property", str, description="key=value: a property with exactly that value."),
    OpenApiParameter("since", OpenApiTypes.DATETIME, description="Collected at or after (ISO 8601)."),
    OpenApiParameter("until", OpenApiTypes.DATETIME, description="Collected at or before (ISO 8601)."),
]


@extend_schema(tags=["dead letters"])
@extend_schema_view(
    list=extend_schema(operation_id="dead_letters_list", summary="Browse the archive",
                       parameters=FILTER_PARAMETERS,
                       responses={200: DeadLetterSerializer(many=True), 400: BAD_INPUT}),
    retrieve=extend_schema(operation_id="dead_letters_retrieve", summary="One dead letter, with its payload",
                           responses={200: DeadLetterDetailSerializer, 404: NOT_FOUND}),
)
class DeadLetterViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ApiViewSet):
    serializer_class = DeadLetterSerializer
    pagination_class = ArchivePagination
    lookup_value_converter = "int"
    read_permission = "archive.view_deadletter"
    action_permissions = {"discard": "archive.discard_deadletter"}

    @property
    def paginator(self):
        paginator = super().paginator
        paginator.page_size = settings.ARCHIVE_PAGE_SIZE
        return paginator

    def get_queryset(self):
        if self.action != "list":
            return DeadLetter.objects.none()
        form = ArchiveFilterForm(self.request.query_params)
        if not form.is_valid():
            raise ValidationError(_form_errors(form))
        return selectors.dead_letter_list(**form.filters())

    def get_serializer_class(self):
        return DeadLetterDetailSerializer if self.action == "retrieve" else DeadLetterSerializer

    def get_object(self) -> DeadLetter:
        # DoesNotExist becomes a JSON 404 in console.errors.
        return selectors.dead_letter_get(letter_id=int(self.kwargs["pk"]))

    @extend_schema(summary="Discard a selection (operator)", operation_id="dead_letters_discard",
                   description="Marks the chosen parked or failed dead letters discarded (kept "
                   "until purged). Audited per cluster and subscription.",
                   request=DiscardSerializer, responses={200: DiscardResultSerializer, 400: BAD_INPUT})
    @action(detail=False, methods=["post"])
    def discard(self, request: Request) -> Response:
        body = DiscardSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ids = sorted(set(body.validated_data["ids"]))
        discarded = services.dead_letters_discard(letter_ids=ids, actor=request.user,
                                                  reason=body.validated_data["reason"])
        return Response({"requested": len(ids), "discarded": discarded})
