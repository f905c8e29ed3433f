"""Clusters over the API: the same reach as the cluster pages, calling the same services.

Secrets are write-only: `password` and `token` are accepted on create/update and
never returned; a response says only whether one is stored (`has_password`,
`has_token`). A broker that fails answers 424 with `{"error", "permanent"}`
(console.errors); nothing here turns a broker failure into a 500.
"""

from __future__ import annotations

from django.db.models import ProtectedError
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from console.api.base import BAD_INPUT, BROKER_FAILED, CONFLICT, NOT_FOUND, ApiViewSet, Conflict
from console.api.payloads import Base64PayloadField, PayloadDisplayField
from console.archive import services as archive_services
from console.archive.selectors import archive_counts_by_subscription
from console.clusters import selectors, services
from console.clusters.models import Cluster, RegisteredSubscription

# --- Serializers ----------------------------------------------------------------


class RegisteredSubscriptionSerializer(serializers.ModelSerializer):
    class Meta:
        model = RegisteredSubscription
        fields = ["id", "name", "source", "mode", "created_at"]
        read_only_fields = fields


class ClusterSerializer(serializers.ModelSerializer):
    password = serializers.CharField(
        write_only=True, required=False, allow_blank=True, trim_whitespace=False, max_length=1000,
        style={"input_type": "password"},
        help_text="Stored encrypted, never returned. Left out or blank on update: the stored one stays.",
    )
    token = serializers.CharField(
        write_only=True, required=False, allow_blank=True, trim_whitespace=False, max_length=10_000,
        style={"input_type": "password"},
        help_text="Auth token (Pulsar). Stored encrypted, never returned. Left out or blank on "
        "update: the stored one stays.",
    )
    has_password = serializers.BooleanField(read_only=True)
    has_token = serializers.BooleanField(read_only=True)
    options = serializers.JSONField(
        required=False,
        help_text='Kind-specific settings as a JSON object, e.g. {"naming_version": "2.9"} for '
        'Pulsar, {"vhost": "/"} for RabbitMQ.',
    )
    registered = RegisteredSubscriptionSerializer(many=True, read_only=True)

    class Meta:
        model = Cluster
        fields = [
            "id", "name", "kind", "service_url", "admin_url", "username", "password", "token",
            "has_password", "has_token", "options", "collect_interval_seconds",
            "last_check_at", "last_check_ok", "last_check_message", "created_at", "registered",
        ]
        read_only_fields = ["last_check_at", "last_check_ok", "last_check_message", "created_at"]

    def validate_options(self, value):
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise serializers.ValidationError("Options must be a JSON object.")
        if _holds_nul(value):
            # PostgreSQL's jsonb cannot store it: refuse here rather than fail at save.
            raise serializers.ValidationError("Options must not contain NUL characters.")
        return value


def _holds_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


class ConnectionTestSerializer(serializers.Serializer):
    reachable = serializers.BooleanField()
    message = serializers.CharField(help_text="What the broker said, or why it could not be reached.")
    checked_at = serializers.DateTimeField(allow_null=True)


class SubscriptionSerializer(serializers.Serializer):
    """One subscription as the broker reports it, plus what the archive holds of it."""

    name = serializers.CharField()
    source = serializers.CharField()
    mode = serializers.CharField()
    retry_queue = serializers.CharField()
    dead_letter_queue = serializers.CharField()
    backlog = serializers.IntegerField(allow_null=True)
    retry_depth = serializers.IntegerField(allow_null=True)
    dead_letter_depth = serializers.IntegerField(allow_null=True)
    consumers = serializers.IntegerField(allow_null=True)
    healthy = serializers.BooleanField()
    problems = serializers.ListField(child=serializers.CharField(),
                                     help_text="What is missing or wrong; empty when healthy.")
    details = serializers.DictField(help_text="Broker-specific facts.")
    archived = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Archived dead letters of this subscription, by state.",
    )


class SubscriptionQuerySerializer(serializers.Serializer):
    subscription = serializers.CharField(max_length=500, help_text="Subscription name.")


class RegisterSubscriptionSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=500)
    source = serializers.CharField(max_length=500, help_text="Topic, stream or routing key it consumes.")
    mode = serializers.CharField(max_length=32, required=False, allow_blank=True, default="",
                                 help_text="e.g. Shared, Key_Shared")


class RebuildStepSerializer(serializers.Serializer):
    action = serializers.CharField()
    target = serializers.CharField()
    detail = serializers.CharField()


class RebuildPlanSerializer(serializers.Serializer):
    subscription = serializers.CharField()
    steps = RebuildStepSerializer(many=True, help_text="Empty: nothing to create.")


class PeekQuerySerializer(SubscriptionQuerySerializer):
    limit = serializers.IntegerField(min_value=1, max_value=500, default=50, required=False)


class PeekedMessageSerializer(serializers.Serializer):
    message_id = serializers.CharField()
    payload = Base64PayloadField(help_text="The exact payload bytes, base64.")
    display = PayloadDisplayField(source="payload", help_text="The payload as the pages show it.")
    properties = serializers.DictField(child=serializers.CharField())
    retry_count = serializers.IntegerField()
    due_at = serializers.DateTimeField(allow_null=True)


class CollectSerializer(SubscriptionQuerySerializer):
    limit = serializers.IntegerField(
        min_value=1, required=False, allow_null=True, default=None,
        help_text="Collect at most this many; left out: what waits in the DLQ now.",
    )


class CollectResultSerializer(serializers.Serializer):
    subscription = serializers.CharField()
    collected = serializers.IntegerField(help_text="Dead letters handed to the archive.")


class DiscardOnBrokerSerializer(SubscriptionQuerySerializer):
    confirm = serializers.BooleanField(
        help_text="Must be true: the dead letters are dropped without being archived.",
    )

    def validate_confirm(self, value: bool) -> bool:
        if not value:
            raise serializers.ValidationError(
                "Set confirm to true: these dead letters are dropped without being archived."
            )
        return value


class DiscardOnBrokerResultSerializer(serializers.Serializer):
    subscription = serializers.CharField()
    discarded = serializers.IntegerField(help_text="Dead letters dropped from the DLQ.")


def _subscription_rows(cluster: Cluster) -> list[dict]:
    archived = archive_counts_by_subscription(cluster=cluster)
    return [
        {
            "name": sub.name, "source": sub.source, "mode": sub.mode,
            "retry_queue": sub.retry_queue, "dead_letter_queue": sub.dead_letter_queue,
            "backlog": sub.backlog, "retry_depth": sub.retry_depth,
            "dead_letter_depth": sub.dead_letter_depth, "consumers": sub.consumers,
            "healthy": sub.healthy, "problems": list(sub.problems), "details": dict(sub.details),
            "archived": archived.get(sub.name, {}),
        }
        for sub in selectors.cluster_subscriptions(cluster=cluster)
    ]


# --- Views ----------------------------------------------------------------------

SUBSCRIPTION_PARAMETER = OpenApiParameter("subscription", str, required=True,
                                          description="Subscription name.")


@extend_schema(tags=["clusters"])
@extend_schema_view(
    list=extend_schema(operation_id="clusters_list", summary="List clusters"),
    retrieve=extend_schema(operation_id="clusters_retrieve", summary="One cluster",
                           responses={200: ClusterSerializer, 404: NOT_FOUND}),
    create=extend_schema(operation_id="clusters_create", summary="Add a cluster (admin)",
                         responses={201: ClusterSerializer, 400: BAD_INPUT}),
    update=extend_schema(operation_id="clusters_update", summary="Replace a cluster's settings (admin)",
                         responses={200: ClusterSerializer, 400: BAD_INPUT, 404: NOT_FOUND}),
    partial_update=extend_schema(operation_id="clusters_partial_update",
                                 summary="Change some of a cluster's settings (admin)",
                                 responses={200: ClusterSerializer, 400: BAD_INPUT, 404: NOT_FOUND}),
    destroy=extend_schema(
        operation_id="clusters_destroy", summary="Delete a cluster (admin)",
        description="Refused (409) while the archive holds dead letters of the cluster.",
        responses={204: None, 404: NOT_FOUND, 409: CONFLICT},
    ),
)
class ClusterViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ApiViewSet):
    queryset = Cluster.objects.none()  # for the schema; requests use get_queryset
    serializer_class = ClusterSerializer
    lookup_value_converter = "int"
    read_permission = "clusters.view_cluster"
    action_permissions = {
        "create": "clusters.add_cluster",
        "update": "clusters.change_cluster",
        "partial_update": "clusters.change_cluster",
        "destroy": "clusters.delete_cluster",
        # Testing a connection reads the broker and changes nothing there: any role may.
        "test_connection": "clusters.view_cluster",
        "register_subscription": "clusters.add_registeredsubscription",
        "rebuild_plan": "clusters.rebuild_cluster",
        "rebuild_apply": "clusters.rebuild_cluster",
        "collect": "archive.collect_deadletter",
        "discard_dead_letters": "archive.discard_deadletter",
    }

    def get_queryset(self):
        return selectors.cluster_list().prefetch_related("registered")

    def create(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        cluster = services.cluster_create(
            actor=request.user, password=data.pop("password", ""), token=data.pop("token", ""), **data
        )
        return Response(self.get_serializer(cluster).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, pk: int, partial: bool = False) -> Response:
        cluster = self.get_object()
        serializer = self.get_serializer(cluster, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        # None (left out) and "" (left blank) both keep the stored secret.
        services.cluster_update(cluster=cluster, actor=request.user,
                                password=data.pop("password", None), token=data.pop("token", None),
                                **data)
        return Response(self.get_serializer(self.get_object()).data)

    def partial_update(self, request: Request, pk: int) -> Response:
        return self.update(request, pk, partial=True)

    def destroy(self, request: Request, pk: int) -> Response:
        cluster = self.get_object()
        try:
            services.cluster_delete(cluster=cluster, actor=request.user)
        except ProtectedError as exc:
            # The archive's rows point at the cluster; the delete and its audit entry
            # were rolled back together.
            raise Conflict(f"Cluster {cluster.name} still has archived dead letters; "
                           "discard and purge them first.") from exc
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(summary="Test the connection", operation_id="clusters_test_connection", request=None,
                   description="Reaches the broker with the stored credentials and remembers the "
                   "answer. Changes nothing on the broker. An unreachable broker is a normal answer "
                   "here (`reachable: false`), not an error.",
                   responses={200: ConnectionTestSerializer, 404: NOT_FOUND})
    @action(detail=True, methods=["post"], url_path="test")
    def test_connection(self, request: Request, pk: int) -> Response:
        cluster = self.get_object()
        reachable, message = services.cluster_test_connection(cluster=cluster)
        cluster.refresh_from_db(fields=["last_check_at"])
        return Response(ConnectionTestSerializer(
            {"reachable": reachable, "message": message, "checked_at": cluster.last_check_at}
        ).data)

    @extend_schema(summary="Subscriptions of a cluster", operation_id="clusters_subscriptions",
                   description="The broker's inventory: each subscription with its retry queue, "
                   "DLQ, depths and topology problems, plus archived counts.",
                   responses={200: SubscriptionSerializer(many=True), 404: NOT_FOUND,
                              424: BROKER_FAILED})
    @action(detail=True, methods=["get"], pagination_class=None)
    def subscriptions(self, request: Request, pk: int) -> Response:
        cluster = self.get_object()
        return Response(SubscriptionSerializer(_subscription_rows(cluster), many=True).data)

    @extend_schema(summary="Register a subscription (admin)",
                   operation_id="clusters_register_subscription",
                   description="For brokers whose subscriptions the console cannot list itself. "
                   "Registering the same name and source twice keeps one.",
                   request=RegisterSubscriptionSerializer,
                   responses={201: RegisteredSubscriptionSerializer, 400: BAD_INPUT, 404: NOT_FOUND})
    @subscriptions.mapping.post
    def register_subscription(self, request: Request, pk: int) -> Response:
        cluster = self.get_object()
        serializer = RegisterSubscriptionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        registered = services.registered_subscription_add(cluster=cluster, actor=request.user,
                                                          **serializer.validated_data)
        return Response(RegisteredSubscriptionSerializer(registered).data,
                        status=status.HTTP_201_CREATED)

    @extend_schema(summary="Plan a rebuild (operator)", operation_id="clusters_rebuild_plan",
                   description="What would be created so the subscription's retry/DLQ topology is "
                   "whole. Changes nothing.",
                   parameters=[SUBSCRIPTION_PARAMETER],
                   responses={200: RebuildPlanSerializer, 400: BAD_INPUT, 404: NOT_FOUND,
                              424: BROKER_FAILED})
    @action(detail=True, methods=["get"], url_path="rebuild")
    def rebuild_plan(self, request: Request, pk: int) -> Response:
        cluster = self.get_object()
        query = SubscriptionQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        plan = services.rebuild_plan(cluster=cluster, subscription=query.validated_data["subscription"])
        return Response(RebuildPlanSerializer(plan).data)

    @extend_schema(summary="Apply a rebuild (operator)", operation_id="clusters_rebuild_apply",
                   description="Plans afresh and creates what is missing; returns the steps carried "
                   "out. Idempotent. Audited, failures included.",
                   request=SubscriptionQuerySerializer,
                   responses={200: RebuildPlanSerializer, 400: BAD_INPUT, 404: NOT_FOUND,
                              424: BROKER_FAILED})
    @rebuild_plan.mapping.post
    def rebuild_apply(self, request: Request, pk: int) -> Response:
        cluster = self.get_object()
        body = SubscriptionQuerySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        done = services.rebuild_apply(cluster=cluster, subscription=body.validated_data["subscription"],
                                      actor=request.user)
        return Response(RebuildPlanSerializer(done).data)

    @extend_schema(summary="Peek at a retry queue", operation_id="clusters_peek_retry_queue",
                   description="Messages waiting in the subscription's retry queue, oldest first, "
                   "without consuming them.",
                   parameters=[SUBSCRIPTION_PARAMETER,
                               OpenApiParameter("limit", int, description="1 to 500, default 50.")],
                   responses={200: PeekedMessageSerializer(many=True), 400: BAD_INPUT,
                              404: NOT_FOUND, 424: BROKER_FAILED})
    @action(detail=True, methods=["get"], url_path="retry-queue", pagination_class=None)
    def peek(self, request: Request, pk: int) -> Response:
        cluster = self.get_object()
        query = PeekQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        peeked = selectors.retry_queue_peek(cluster=cluster, **query.validated_data)
        return Response(PeekedMessageSerializer(peeked.messages, many=True).data)

    @extend_schema(summary="Collect a DLQ into the archive (operator)",
                   operation_id="clusters_collect_dead_letters",
                   description="Moves what waits in the subscription's DLQ into the archive. A "
                   "message leaves the broker only after its archive row is committed; collecting "
                   "twice never makes two rows. Audited, failures included.",
                   request=CollectSerializer,
                   responses={200: CollectResultSerializer, 400: BAD_INPUT, 404: NOT_FOUND,
                              424: BROKER_FAILED})
    @action(detail=True, methods=["post"])
    def collect(self, request: Request, pk: int) -> Response:
        cluster = self.get_object()
        body = CollectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        subscription = body.validated_data["subscription"]
        moved = archive_services.dead_letters_collect(
            cluster=cluster, subscription=subscription, actor=request.user,
            limit=body.validated_data["limit"],
        )
        return Response({"subscription": subscription, "collected": moved})

    @extend_schema(summary="Discard what waits in a DLQ (operator)",
                   operation_id="clusters_discard_dead_letters",
                   description="Drops the dead letters still waiting in the subscription's DLQ "
                   "WITHOUT archiving them (collect first to keep them). Needs `confirm: true`. "
                   "Audited, failures included.",
                   request=DiscardOnBrokerSerializer,
                   responses={200: DiscardOnBrokerResultSerializer, 400: BAD_INPUT, 404: NOT_FOUND,
                              424: BROKER_FAILED})
    @action(detail=True, methods=["post"], url_path="discard-dlq")
    def discard_dead_letters(self, request: Request, pk: int) -> Response:
        cluster = self.get_object()
        body = DiscardOnBrokerSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        subscription = body.validated_data["subscription"]
        dropped = archive_services.dead_letters_discard_on_broker(
            cluster=cluster, subscription=subscription, actor=request.user
        )
        return Response({"subscription": subscription, "discarded": dropped})

