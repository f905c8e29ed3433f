"""The replay engine over the API: jobs (create, watch, pause, resume, cancel),
resending one letter, replay policies and the retention setting.

Same services and the same validation as the pages; a job's numbers come from the
same selector as the progress bar.
"""

from __future__ import annotations

import base64
import binascii

from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from console.api.base import BAD_INPUT, CONFLICT, NOT_FOUND, ApiViewSet, Conflict
from console.archive.forms import ArchiveFilterForm
from console.archive.models import DeadLetter
from console.clusters.models import Cluster
from console.replay import selectors, services
from console.replay.models import ReplayJob, ReplayPolicy


def _bad_input(exc: DjangoValidationError) -> ValidationError:
    if hasattr(exc, "error_dict"):
        return ValidationError({field: [m for e in errors for m in e.messages]
                                for field, errors in exc.error_dict.items()})
    return ValidationError({"non_field_errors": exc.messages})


class JobSerializer(serializers.ModelSerializer):
    remaining = serializers.IntegerField(read_only=True)
    percent = serializers.IntegerField(read_only=True)
    eta_seconds = serializers.IntegerField(read_only=True, allow_null=True)
    rate = serializers.FloatField(source="achieved_rate", read_only=True,
                                  help_text="Messages per second achieved by the current or last run.")

    class Meta:
        model = ReplayJob
        fields = ["id", "created_at", "created_by_name", "policy", "description", "filters", "rate_limit",
                  "batch_size", "destination", "dry_run", "state", "state_reason", "total", "done", "failed",
                  "skipped", "remaining", "percent", "rate", "eta_seconds", "started_at", "finished_at"]
        read_only_fields = fields


class JobCreateSerializer(serializers.Serializer):
    ids = serializers.ListField(child=serializers.IntegerField(min_value=1), required=False,
                                max_length=100_000, help_text="Archive ids to replay (or give `filters`).")
    filters = serializers.DictField(required=False, help_text="Archive filters, as on the dead-letters "
                                    "page: cluster, subscription, state, text, property (key=value), "
                                    "since, until. {} matches the whole archive.")
    rate_limit = serializers.FloatField(required=False, allow_null=True, default=services.DEFAULT_RATE,
                                        help_text="Messages per second; null for no limit.")
    batch_size = serializers.IntegerField(required=False, default=services.DEFAULT_BATCH)
    destination = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)
    dry_run = serializers.BooleanField(required=False, default=False)
    description = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)

    def validate(self, attrs):
        if ("ids" in attrs) == ("filters" in attrs):
            raise ValidationError({"non_field_errors": ["Give either `ids` or `filters`."]})
        if "filters" in attrs:
            unknown = sorted(set(attrs["filters"]) - set(ArchiveFilterForm.base_fields))
            if unknown:
                raise ValidationError({"filters": [f"Unknown filter(s): {', '.join(unknown)}."]})
            form = ArchiveFilterForm({k: v for k, v in attrs["filters"].items() if v not in (None, "")})
            if not form.is_valid():
                raise ValidationError({"filters": [f"{f}: {' '.join(e)}" for f, e in form.errors.items()]})
            attrs["filters"] = form.filters()
        return attrs


class ResendSerializer(serializers.Serializer):
    payload_base64 = serializers.CharField(required=False, help_text="Edited payload, base64; omit to "
                                           "send the original.")
    properties = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False,
                                       help_text="Edited properties (all of them); omit to keep.")
    destination = serializers.CharField(required=False, allow_blank=True, default="", max_length=500)

    def validate_payload_base64(self, value: str) -> bytes:
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValidationError("Not valid base64.") from exc


class PolicySerializer(serializers.ModelSerializer):
    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.all())

    class Meta:
        model = ReplayPolicy
        fields = ["id", "name", "cluster", "subscription", "filters", "rate_limit", "max_per_run", "cron",
                  "enabled", "created_at", "updated_at"]
        read_only_fields = ["id", "created_at", "updated_at"]
        # Uniqueness is checked by the service inside its transaction.
        extra_kwargs = {"name": {"validators": []}}


class RetentionSerializer(serializers.Serializer):
    discarded_retention_days = serializers.IntegerField(min_value=1, max_value=3650)


class PurgeResultSerializer(serializers.Serializer):
    purged = serializers.IntegerField()


@extend_schema_view(
    list=extend_schema(summary="Replay jobs, newest first"),
    retrieve=extend_schema(summary="One job with its progress",
                           responses={200: JobSerializer, 404: NOT_FOUND}),
)
class ReplayJobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ApiViewSet):
    serializer_class = JobSerializer
    read_permission = "replay.view_replayjob"
    write_permission = "replay.add_replayjob"
    action_permissions = {"pause": "replay.control_replayjob", "resume": "replay.control_replayjob",
                          "cancel": "replay.control_replayjob"}

    def get_queryset(self):
        return selectors.replay_job_list(state=self.request.query_params.get("state", ""))

    @extend_schema(summary="Start a replay job (or a dry run) over ids or a filter",
                   request=JobCreateSerializer,
                   responses={201: JobSerializer, 400: BAD_INPUT, 409: CONFLICT})
    def create(self, request):
        data = JobCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = dict(data.validated_data)
        try:
            job = services.replay_job_create(
                actor=request.user, letter_ids=values.pop("ids", None), filters=values.pop("filters", None),
                **values)
        except DjangoValidationError as exc:
            if "already in replay job" in " ".join(exc.messages):
                raise Conflict(" ".join(exc.messages)) from exc
            raise _bad_input(exc) from exc
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)

    def _control(self, pk, service):
        job = get_object_or_404(ReplayJob, pk=pk)
        try:
            job = service(job_id=job.pk, actor=self.request.user)
        except DjangoValidationError as exc:
            raise Conflict(" ".join(exc.messages)) from exc
        return Response(JobSerializer(job).data)

    @extend_schema(summary="Pause after the batch in flight", request=None,
                   responses={200: JobSerializer, 404: NOT_FOUND, 409: CONFLICT})
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return self._control(pk, services.replay_job_pause)

    @extend_schema(summary="Resume a paused, failed or stalled job", request=None,
                   responses={200: JobSerializer, 404: NOT_FOUND, 409: CONFLICT})
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return self._control(pk, services.replay_job_resume)

    @extend_schema(summary="Cancel for good; letters not sent stay parked", request=None,
                   responses={200: JobSerializer, 404: NOT_FOUND, 409: CONFLICT})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        return self._control(pk, services.replay_job_cancel)


class ResendViewSet(ApiViewSet):
    write_permission = "replay.add_replayjob"
    serializer_class = ResendSerializer

    @extend_schema(summary="Resend one dead letter, optionally edited (the original is kept)",
                   request=ResendSerializer,
                   responses={201: JobSerializer, 400: BAD_INPUT, 404: NOT_FOUND})
    def create(self, request, letter_id: int):
        letter = get_object_or_404(DeadLetter.objects.select_related("cluster"), pk=letter_id)
        data = ResendSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        try:
            job = services.dead_letter_resend(letter=letter, actor=request.user,
                                              payload=values.get("payload_base64"),
                                              properties=values.get("properties"),
                                              destination=values.get("destination", ""))
        except DjangoValidationError as exc:
            raise _bad_input(exc) from exc
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    list=extend_schema(summary="Replay policies (schedules)"),
    retrieve=extend_schema(summary="One replay policy", responses={200: PolicySerializer, 404: NOT_FOUND}),
)
class ReplayPolicyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ApiViewSet):
    serializer_class = PolicySerializer
    read_permission = "replay.view_replaypolicy"
    write_permission = "replay.change_replaypolicy"
    action_permissions = {"create": "replay.add_replaypolicy", "destroy": "replay.delete_replaypolicy"}

    def get_queryset(self):
        return selectors.replay_policy_list()

    def _save(self, request, policy):
        partial = policy is not None and request.method == "PATCH"
        data = PolicySerializer(policy, data=request.data, partial=partial)
        data.is_valid(raise_exception=True)
        try:
            saved = services.replay_policy_save(actor=request.user, policy=policy, **data.validated_data)
        except DjangoValidationError as exc:
            raise _bad_input(exc) from exc
        return Response(PolicySerializer(saved).data,
                        status=status.HTTP_201_CREATED if policy is None else status.HTTP_200_OK)

    @extend_schema(summary="Create a policy and its beat schedule", request=PolicySerializer,
                   responses={201: PolicySerializer, 400: BAD_INPUT})
    def create(self, request):
        return self._save(request, None)

    @extend_schema(summary="Replace a policy", request=PolicySerializer,
                   responses={200: PolicySerializer, 400: BAD_INPUT, 404: NOT_FOUND})
    def update(self, request, pk=None):
        return self._save(request, get_object_or_404(ReplayPolicy, pk=pk))

    @extend_schema(summary="Change some fields of a policy", request=PolicySerializer,
                   responses={200: PolicySerializer, 400: BAD_INPUT, 404: NOT_FOUND})
    def partial_update(self, request, pk=None):
        return self._save(request, get_object_or_404(ReplayPolicy, pk=pk))

    @extend_schema(summary="Delete a policy and its beat schedule", responses={204: None, 404: NOT_FOUND})
    def destroy(self, request, pk=None):
        services.replay_policy_delete(policy=get_object_or_404(ReplayPolicy, pk=pk), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class RetentionViewSet(ApiViewSet):
    serializer_class = RetentionSerializer
    read_permission = "replay.view_retentionsetting"
    write_permission = "replay.change_retentionsetting"

    @extend_schema(summary="How long discarded letters are kept", responses={200: RetentionSerializer})
    def list(self, request):
        setting = services.retention_setting()
        return Response({"discarded_retention_days": setting.discarded_retention_days})

    @extend_schema(summary="Set how long discarded letters are kept", request=RetentionSerializer,
                   responses={200: RetentionSerializer, 400: BAD_INPUT})
    def create(self, request):
        data = RetentionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        setting = services.retention_update(actor=request.user,
                                            days=data.validated_data["discarded_retention_days"])
        return Response({"discarded_retention_days": setting.discarded_retention_days})

    @extend_schema(summary="Purge discarded letters past the retention period now", request=None,
                   responses={200: PurgeResultSerializer})
    @action(detail=False, methods=["post"])
    def purge(self, request):
        return Response({"purged": services.retention_purge(actor=request.user)})
