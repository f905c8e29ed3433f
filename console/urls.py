from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.http import JsonResponse
from django.urls import include, path
from django.views.generic import RedirectView

from console.accounts import views as account_views


@login_not_required
def health(request):
    """Liveness for load balancers and compose healthchecks: no login, no detail."""
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("", RedirectView.as_view(pattern_name="clusters:list"), name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/", account_views.account, name="account"),
    path("clusters/", include("console.clusters.urls")),
    path("archive/", include("console.archive.urls")),
    path("audit/", include("console.audit.urls")),
    path("replay/", include("console.replay.urls")),
    path("analytics/", include("console.analytics.urls")),
    path("api/", include("console.api.urls")),
    path("django-admin/", admin.site.urls),
    path("health/", health, name="health"),
]
