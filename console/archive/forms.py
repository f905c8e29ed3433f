"""The archive filter, shared by the pages and the API so both refuse the same input."""

from __future__ import annotations

from django import forms

from console.archive.models import DeadLetter


class ArchiveFilterForm(forms.Form):
    cluster = forms.IntegerField(required=False, min_value=1)
    subscription = forms.CharField(required=False, max_length=500)
    state = forms.ChoiceField(required=False, choices=[("", "any state"), *DeadLetter.STATE_CHOICES])
    text = forms.CharField(required=False, max_length=500, label="Text")
    property = forms.CharField(
        required=False, max_length=1000, label="Property",
        help_text="key=value, e.g. error=TimeoutException",
    )
    since = forms.DateTimeField(required=False, label="Collected since",
                                widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    until = forms.DateTimeField(required=False, label="Collected until",
                                widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))

    def clean_property(self) -> tuple[str, str] | None:
        raw = self.cleaned_data.get("property", "")
        if not raw:
            return None
        key, sep, value = raw.partition("=")
        if not sep or not key.strip():
            raise forms.ValidationError("Write the property filter as key=value.")
        return key.strip(), value

    def clean(self):
        data = super().clean()
        if data.get("since") and data.get("until") and data["since"] > data["until"]:
            raise forms.ValidationError("'Collected since' is after 'Collected until'.")
        return data

    def filters(self) -> dict:
        """Validated filters as keyword arguments of `dead_letter_list`."""
        return {key: value for key, value in self.cleaned_data.items() if value not in (None, "")}
