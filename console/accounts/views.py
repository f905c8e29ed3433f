"""Own account: issue an API token for automation."""

from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from console.accounts.services import user_token_issue


@require_http_methods(["GET", "POST"])
def account(request):
    token = None
    if request.method == "POST":
        # Shown once, never stored in the clear elsewhere in the UI.
        token = user_token_issue(user=request.user)
    return render(request, "accounts/account.html", {"token": token})
