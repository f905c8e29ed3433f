"""REST API of the analytics pipeline: runs (list, start one) and the loaded summaries.

Views are marked login_not_required: DRF authenticates tokens and sessions itself
and RolePermission checks `read_permission` / `write_permission`.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import APIException
from rest_framework.response import Response

from console.analytics import selectors, services
from console.analytics.models import (
    DuplicateGroup,
    FailureOverview,
    FailureReason,
    PipelineRun,
    ReplayCandidates,
    RetryHistogram,
    TimeToDlq,
)

VIEW = "analytics.view_pipelinerun"
RUN = "analytics.run_pipeline"


class RunConflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "A pipeline run is already queued or running."
    default_code = "conflict"


class _ErrorSerializer(serializers.Serializer):
    error = serializers.CharField()


class PipelineRunSerializer(serializers.ModelSerializer):
    duration_seconds = serializers.FloatField(read_only=True, allow_null=True)

    class Meta:
        model = PipelineRun
        fields = [
            "id",
            "trigger",
            "requested_by_name",
            "status",
            "master",
            "created_at",
            "started_at",
            "finished_at",
            "duration_seconds",
            "exported_rows",
            "input_rows",
            "jobs",
            "error",
        ]
        read_only_fields = fields


def _summary_serializer(summary_model):
    class Serializer(serializers.ModelSerializer):
        class Meta:
            model = summary_model
            exclude = ["id"]

    Serializer.__name__ = f"{summary_model.__name__}Serializer"
    return Serializer


class _AnalyticsView(generics.GenericAPIView):
    read_permission = VIEW
    write_permission: str | None = None

    @classmethod
    def as_view(cls, **initkwargs):
        return login_not_required(super().as_view(**initkwargs))


class PipelineRunList(_AnalyticsView, generics.ListAPIView):
    """Runs, newest first (GET); start a run now (POST, operator)."""

    serializer_class = PipelineRunSerializer
    queryset = PipelineRun.objects.order_by("-created_at", "-id")
    write_permission = RUN

    @extend_schema(
        request=None,
        responses={
            202: PipelineRunSerializer,
            409: OpenApiResponse(_ErrorSerializer, description="A run is active."),
        },
    )
    def post(self, request):
        try:
            run = services.pipeline_run_request(actor=request.user, trigger=PipelineRun.ON_DEMAND)
        except services.PipelineBusy as exc:
            raise RunConflict(str(exc)) from exc
        return Response(PipelineRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class PipelineRunDetail(_AnalyticsView, generics.RetrieveAPIView):
    serializer_class = PipelineRunSerializer
    queryset = PipelineRun.objects.all()
    lookup_url_kwarg = "run_id"


def _summary_list(summary_model, doc: str):
    class SummaryList(_AnalyticsView, generics.ListAPIView):
        __doc__ = doc
        serializer_class = _summary_serializer(summary_model)
        queryset = summary_model.objects.all()

    SummaryList.__name__ = f"{summary_model.__name__}List"
    return SummaryList


FailureOverviewList = _summary_list(
    FailureOverview, "Dead letters per cluster, subscription, source and day, with what became of them."
)
RetryHistogramList = _summary_list(RetryHistogram, "Dead letters per retry count, per subscription.")
TimeToDlqList = _summary_list(
    TimeToDlq, "Seconds from first failure to the DLQ: p50/p90/p99 per subscription."
)
FailureReasonList = _summary_list(
    FailureReason, "Failure reasons (exception class + normalised error text), most letters first."
)
DuplicateGroupList = _summary_list(
    DuplicateGroup, "Origin ids and business keys dead-lettered more than once."
)

ReplayCandidatesSerializer = _summary_serializer(ReplayCandidates)


class ReplayCandidatesView(_AnalyticsView):
    """The dead-letter ids the nightly replay policy selected: give them to
    POST /api/v1/replay/jobs/ as the selection of a replay job."""

    serializer_class = ReplayCandidatesSerializer

    @extend_schema(
        responses={
            200: ReplayCandidatesSerializer,
            404: OpenApiResponse(_ErrorSerializer, description="No run loaded yet."),
        }
    )
    def get(self, request):
        candidates = selectors.replay_candidates_latest()
        if candidates is None:
            return Response(
                {"error": "No pipeline run has loaded results yet."}, status=status.HTTP_404_NOT_FOUND
            )
        return Response(ReplayCandidatesSerializer(candidates).data)
