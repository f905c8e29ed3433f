from __future__ import annotations

from django import forms

from console.clusters.models import Cluster

# Write-only, and never autofilled with the admin's own console password.
SECRET_INPUT = forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"})


class ClusterForm(forms.ModelForm):
    """Add or edit a cluster. Secrets are write-only: left blank, the stored one stays."""

    password = forms.CharField(
        required=False, strip=False, widget=SECRET_INPUT,
        help_text="Stored encrypted; never shown again. Leave blank to keep the current one.",
    )
    token = forms.CharField(
        required=False, strip=False, widget=SECRET_INPUT,
        help_text="Auth token (Pulsar). Stored encrypted; leave blank to keep the current one.",
    )
    options = forms.JSONField(
        required=False, initial=dict,
        help_text='Kind-specific settings as JSON, e.g. {"naming_version": "2.9"} for Pulsar, '
        '{"vhost": "/"} for RabbitMQ.',
    )

    class Meta:
        model = Cluster
        fields = ["name", "kind", "service_url", "admin_url", "username", "options",
                  "collect_interval_seconds"]
        help_texts = {
            "service_url": "pulsar://host:6650, redis://host:6379/5, amqp://host:5672/vhost",
            "admin_url": "Pulsar admin REST URL or RabbitMQ management URL (http://host:15672)",
        }

    def clean_options(self):
        value = self.cleaned_data.get("options") or {}
        if not isinstance(value, dict):
            raise forms.ValidationError("Options must be a JSON object.")
        return value


class RegisterSubscriptionForm(forms.Form):
    name = forms.CharField(max_length=500)
    source = forms.CharField(max_length=500, help_text="Topic, stream or routing key it consumes")
    mode = forms.CharField(max_length=32, required=False, help_text="e.g. Shared, Key_Shared")
