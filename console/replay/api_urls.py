from django.urls import path
from rest_framework.routers import SimpleRouter

from console.replay.api import ReplayJobViewSet, ReplayPolicyViewSet, ResendViewSet, RetentionViewSet

router = SimpleRouter()
router.register("jobs", ReplayJobViewSet, basename="replay-job")
router.register("policies", ReplayPolicyViewSet, basename="replay-policy")

urlpatterns = [
    *router.urls,
    path("dead-letters/<int:letter_id>/resend/", ResendViewSet.as_view({"post": "create"}),
         name="replay-resend"),
    path("retention/", RetentionViewSet.as_view({"get": "list", "put": "create"}), name="replay-retention"),
    path("retention/purge/", RetentionViewSet.as_view({"post": "purge"}), name="replay-retention-purge"),
]
