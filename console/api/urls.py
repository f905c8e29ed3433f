"""The API: /api/v1/ endpoints, the OpenAPI schema and its Swagger UI.

Every view under v1/ is a DRF view, which LoginRequiredMiddleware leaves alone: DRF
authenticates tokens and sessions itself and answers 401/403 in JSON (console.api.base).
"""

from django.contrib.auth.decorators import login_required
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from console.api.accounts import TokenView, UserViewSet
from console.api.archive import DeadLetterViewSet
from console.api.audit import AuditEntryViewSet
from console.api.base import NotFoundView
from console.api.clusters import ClusterViewSet

router = SimpleRouter(use_regex_path=False)
router.register("clusters", ClusterViewSet, basename="cluster")
router.register("dead-letters", DeadLetterViewSet, basename="dead-letter")
router.register("audit", AuditEntryViewSet, basename="audit-entry")
router.register("users", UserViewSet, basename="user")

urlpatterns = [
    path("v1/replay/", include("console.replay.api_urls")),
    path("v1/analytics/", include("console.analytics.api_urls")),
    path("v1/auth/token/", TokenView.as_view(), name="api-token"),
    path("v1/", include((router.urls, "api"), namespace="api")),
    # Last: any other path under v1/ is a JSON 404, not the HTML page.
    re_path(r"^v1/(?P<rest>[\s\S]*)$", NotFoundView.as_view(), name="api-not-found"),
    # The schema answers token-authenticated scripts too (SERVE_PERMISSIONS asks for a
    # logged-in caller and refuses others in JSON). The Swagger page is for people:
    # an anonymous visitor is sent to the login page rather than shown a bare 401.
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", login_required(SpectacularSwaggerView.as_view(url_name="api-schema")),
         name="api-docs"),
]
