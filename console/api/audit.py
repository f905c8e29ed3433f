"""The audit log over the API (admin): list with the page's filters, and CSV export."""

from __future__ import annotations

import json

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.pagination import PageNumberPagination
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request

from console.api.base import BAD_INPUT, ApiViewSet
from console.audit.models import AuditEntry
from console.audit.selectors import audit_csv_rows, audit_entry_list


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True,
                                  help_text='Username, or "system" for beat and workers.')
    cluster = serializers.CharField(source="cluster_name", read_only=True)

    class Meta:
        model = AuditEntry
        fields = ["id", "created_at", "actor", "action", "cluster", "subscription", "count",
                  "result", "detail"]
        read_only_fields = fields


class AuditFilterSerializer(serializers.Serializer):
    # CharField refuses NUL characters, which PostgreSQL cannot compare against.
    action = serializers.CharField(required=False, allow_blank=True, max_length=64, default="")
    actor = serializers.CharField(required=False, allow_blank=True, max_length=150, default="")


class CsvRenderer(BaseRenderer):
    """Lets a client ask for `Accept: text/csv`. The export itself streams rows and never
    goes through a renderer; errors asked for as CSV come back as a JSON text."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return json.dumps(data).encode()


class AuditPagination(PageNumberPagination):
    page_size = 100


AUDIT_FILTERS = [
    OpenApiParameter("action", str, description='Exact action, e.g. "archive.discard".'),
    OpenApiParameter("actor", str, description="Exact username of who acted."),
]


@extend_schema(tags=["audit"])
@extend_schema_view(
    list=extend_schema(operation_id="audit_list", summary="The audit log (admin)", parameters=AUDIT_FILTERS,
                       responses={200: AuditEntrySerializer(many=True), 400: BAD_INPUT}),
)
class AuditEntryViewSet(mixins.ListModelMixin, ApiViewSet):
    serializer_class = AuditEntrySerializer
    pagination_class = AuditPagination
    read_permission = "audit.view_auditentry"

    def get_queryset(self):
        # Validated before the export starts streaming, so bad input is still a clean 400.
        filters = AuditFilterSerializer(data=self.request.query_params)
        filters.is_valid(raise_exception=True)
        return audit_entry_list(**filters.validated_data)

    @extend_schema(summary="Export the audit log as CSV (admin)", operation_id="audit_export_csv",
                   parameters=AUDIT_FILTERS,
                   responses={(200, "text/csv"): OpenApiResponse(
                       OpenApiTypes.STR,
                       description="Columns: created_at, actor, action, cluster, subscription, "
                       "count, result, detail. Cells a spreadsheet would run as a formula are "
                       "prefixed with a quote."),
                              (400, "application/json"): BAD_INPUT})
    @action(detail=False, methods=["get"], renderer_classes=[JSONRenderer, CsvRenderer],
            pagination_class=None)
    def export(self, request: Request) -> StreamingHttpResponse:
        response = StreamingHttpResponse(audit_csv_rows(self.get_queryset()), content_type="text/csv")
        response["Content-Disposition"] = 'attachment; filename="redrive-audit.csv"'
        return response
