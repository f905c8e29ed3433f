"""Forms of the replay pages; the API validates through the same services."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from console.clusters.models import Cluster
from console.replay import services


class ReplayOptionsForm(forms.Form):
    """How to replay: rate, batch, destination, dry run. The selection (ids or the
    archive filter) travels next to it in the same POST."""

    rate_limit = forms.FloatField(required=False, initial=services.DEFAULT_RATE, label="Rate (msg/s)",
                                  help_text=f"At most {services.MAX_RATE:,.0f} messages per second.")
    unthrottled = forms.BooleanField(required=False, label="No rate limit")
    batch_size = forms.IntegerField(required=False, initial=services.DEFAULT_BATCH, label="Batch size",
                                    help_text=f"1 to {services.MAX_BATCH}.")
    destination = forms.CharField(required=False, max_length=500,
                                  help_text="Empty: where each letter came from.")
    description = forms.CharField(required=False, max_length=500)
    dry_run = forms.BooleanField(required=False, label="Dry run (only count)")

    def clean(self):
        data = super().clean()
        if data.get("unthrottled"):
            data["rate_limit"] = None
        elif data.get("rate_limit") is None and "rate_limit" not in self.errors:
            raise forms.ValidationError("Give a rate in messages per second, or tick 'No rate limit'.")
        if data.get("batch_size") is None:
            data["batch_size"] = services.DEFAULT_BATCH
        return data

    def job_options(self) -> dict:
        data = self.cleaned_data
        return {"rate_limit": data["rate_limit"], "batch_size": data["batch_size"],
                "destination": data.get("destination", ""), "dry_run": data.get("dry_run", False),
                "description": data.get("description", "")}


class ResendForm(forms.Form):
    payload = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 10}),
                              help_text="Leave as it is to resend the original payload.")
    properties = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 6}),
                                 help_text="A JSON object of text keys and values.")

    def clean_properties(self):
        try:
            return services.properties_clean(self.cleaned_data.get("properties") or "{}")
        except ValidationError as exc:
            raise forms.ValidationError(exc.messages) from exc


class PolicyForm(forms.Form):
    name = forms.CharField(max_length=100)
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.all())
    subscription = forms.CharField(max_length=500)
    text = forms.CharField(required=False, max_length=500, label="Payload text contains")
    property = forms.CharField(required=False, max_length=1000, label="Property key=value")
    rate_limit = forms.FloatField(initial=100, label="Rate (msg/s)")
    max_per_run = forms.IntegerField(initial=1000, min_value=1, max_value=1_000_000)
    cron = forms.CharField(max_length=100, initial="0 2 * * *",
                           help_text="minute hour day-of-month month day-of-week, in UTC")
    enabled = forms.BooleanField(required=False, initial=True)

    def policy_fields(self) -> dict:
        data = self.cleaned_data
        return {"name": data["name"], "cluster": data["cluster"], "subscription": data["subscription"],
                "filters": {k: data[k] for k in ("text", "property") if data.get(k)},
                "rate_limit": data["rate_limit"], "max_per_run": data["max_per_run"],
                "cron": data["cron"], "enabled": data["enabled"]}


class RetentionForm(forms.Form):
    discarded_retention_days = forms.IntegerField(min_value=1, max_value=3650,
                                                  label="Keep discarded letters (days)")


def errors_from(exc, form: forms.Form) -> None:
    """Put a service's ValidationError onto a form, by field where it names one."""
    if hasattr(exc, "error_dict"):
        for field, errors in exc.error_dict.items():
            target = field if field in form.fields else None
            for error in errors:
                form.add_error(target, error)
    else:
        for message in exc.messages:
            form.add_error(None, message)
