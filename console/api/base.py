"""What every Redrive API view shares: role checks, error shapes, paging.

Django's LoginRequiredMiddleware only knows session logins: it would send a
token-authenticated script to the login page. DRF views are exempt from it (DRF's
`as_view` marks them `login_required = False`) and authenticate tokens and sessions
themselves, answering 401/403 in JSON. That is safe because the default permission
(`RolePermission`) refuses anyone without a role, and a view that forgets its
`write_permission` accepts no write at all. tests/api/test_access.py checks every URL
under /api/v1/ for it, whoever wrote the view.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers, status, viewsets
from rest_framework.exceptions import APIException, NotFound
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import SAFE_METHODS, IsAuthenticated
from rest_framework.views import APIView

from console.api.parsers import NestingSafeJSONParser

API_PARSERS = [NestingSafeJSONParser, FormParser, MultiPartParser]


class ApiViewSet(viewsets.GenericViewSet):
    """A viewset whose actions each name the permission they need.

    `read_permission` / `write_permission` are what `RolePermission` checks; an
    action listed in `action_permissions` replaces the one matching its method
    (read for GET/HEAD/OPTIONS, write otherwise). One table per viewset keeps who
    may do what readable in one place.
    """

    parser_classes = API_PARSERS
    read_permission: str | None = None
    write_permission: str | None = None
    action_permissions: dict[str, str] = {}

    def initial(self, request, *args, **kwargs):
        needed = self.action_permissions.get(self.action or "")
        if needed:
            if request.method in SAFE_METHODS:
                self.read_permission = needed
            else:
                self.write_permission = needed
        super().initial(request, *args, **kwargs)


class ArchivePagination(PageNumberPagination):
    """`?page=` and an optional `?page_size=` (at most 500)."""

    page_size_query_param = "page_size"
    max_page_size = 500


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state."
    default_code = "conflict"


# --- Error bodies, for the schema ------------------------------------------------
# console.errors.api_exception_handler turns every error into one of these shapes.


class ErrorSerializer(serializers.Serializer):
    error = serializers.CharField(help_text="What went wrong, in words.")


class BrokerErrorSerializer(serializers.Serializer):
    error = serializers.CharField(help_text="The broker's failure, in words.")
    permanent = serializers.BooleanField(
        help_text="True if trying again cannot help (bad credentials, missing adapter, "
        "unknown destination); false if the broker may answer later."
    )


BAD_INPUT = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description="Bad input: an object mapping each field (or `non_field_errors`) to its messages.",
)
NOT_FOUND = OpenApiResponse(ErrorSerializer, description="No such object.")
BROKER_FAILED = OpenApiResponse(
    BrokerErrorSerializer,
    description="The broker could not be reached or refused the call. Nothing is lost: what a "
    "failed collect had archived stays archived, the rest stays on the broker.",
)
CONFLICT = OpenApiResponse(ErrorSerializer, description="Refused in the object's current state.")


class NotFoundView(APIView):
    """Any other path under /api/v1/: a JSON 404 (after authentication) instead of the
    HTML page, so a script with a typo in its URL reads what went wrong."""

    schema = None  # not an endpoint
    permission_classes = [IsAuthenticated]

    def http_method_not_allowed(self, request, *args, **kwargs):
        raise NotFound("No API endpoint at this path (API paths end with a slash).")

    def get(self, request, *args, **kwargs):
        return self.http_method_not_allowed(request)

    post = put = patch = delete = options = get
