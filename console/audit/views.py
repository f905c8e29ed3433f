from __future__ import annotations

from django.contrib.auth.decorators import permission_required
from django.core.paginator import Paginator
from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from console.audit.forms import AuditFilterForm
from console.audit.selectors import audit_csv_rows, audit_entry_list


@require_GET
@permission_required("audit.view_auditentry", raise_exception=True)
def audit_list(request):
    form = AuditFilterForm(request.GET)
    entries = audit_entry_list(**form.filters())
    page = Paginator(entries, 100).get_page(request.GET.get("page"))
    return render(request, "audit/list.html", {"page": page, "form": form})


@require_GET
@permission_required("audit.view_auditentry", raise_exception=True)
def audit_export(request):
    entries = audit_entry_list(**AuditFilterForm(request.GET).filters())
    response = StreamingHttpResponse(audit_csv_rows(entries), content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="redrive-audit.csv"'
    return response
