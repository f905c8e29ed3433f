from __future__ import annotations

from django import forms


class AuditFilterForm(forms.Form):
    """Filters of the audit page and its CSV export (CharField refuses NUL characters)."""

    action = forms.CharField(required=False, max_length=64)
    actor = forms.CharField(required=False, max_length=150)

    def filters(self) -> dict[str, str]:
        if not self.is_valid():
            return {"action": "", "actor": ""}
        return {"action": self.cleaned_data["action"], "actor": self.cleaned_data["actor"]}
