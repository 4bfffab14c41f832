"""Admin helpers shared by the apps: readable JSON, previews, read-only admins, and the admin that writes
only through services; JSON form fields pass the input gate.

A staff edit is a write like any other, so it goes through the same service, and a refusal is shown the
way Django shows a form error: `ServiceAdmin.save_model` calls the service through `service_call`; when
it refuses (`ApplicationError`), the whole admin transaction rolls back and the change form is shown
again with the staff's input and the service's message on the field it names (`extra.fields`, or the
field the admin maps the code to), never beside a "changed successfully".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from opencompany.core import gate, logins
from opencompany.core.errors import ApplicationError
from opencompany.core.models import LoginThrottle

PREVIEW_CHARS = 120
ISSUES_SHOWN = 20


def pretty_json(value: Any) -> str:
    """JSON shown readably (escaped) in an admin field."""
    return format_html(
        "<pre style='white-space:pre-wrap;max-width:100ch'>{}</pre>",
        json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False),
    )


def preview(text: str | None, limit: int = PREVIEW_CHARS) -> str:
    """Text on one line, cut with an ellipsis past `limit` characters (list columns only)."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class ReadOnlyMixin:
    """For rows only services write (and staff may only look at)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class GatedJSONFormField(forms.JSONField):
    """A JSON form field whose text passes the input gate (nesting bounded before parsing, no NUL or
    lone surrogate in any string); a refusal is a form error, never a server error, and the form shows
    the text again as it was sent."""

    def bound_data(self, data: Any, initial: Any) -> Any:
        # Django parses the submitted text again to show it on the re-rendered form: text the gate
        # refuses is shown as typed instead (parsing it could recurse past the stack, and a lone
        # surrogate cannot be written into the page).
        if isinstance(data, str) and not self.disabled:
            try:
                gate.check_raw_depth(data, field=str(self.label or "value"))
                gate.check_strings(gate.parse(data))
            except (ApplicationError, ValueError):
                return forms.fields.InvalidJSONInput(data)
        return super().bound_data(data, initial)

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and value.strip():
            try:
                gate.check_raw_depth(value, field=str(self.label or "value"))
            except ApplicationError as exc:
                raise forms.ValidationError(gate.reason(exc), code="invalid") from exc
        parsed = super().to_python(value)
        try:
            gate.check_strings(parsed)
        except ApplicationError as exc:
            raise forms.ValidationError(gate.reason(exc), code="invalid") from exc
        return parsed


class WorkflowIdFilter(admin.SimpleListFilter):
    """By workflow id, taken from the rows themselves (a deleted workflow's rows included)."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        ids = model_admin.model.objects.order_by("workflow_id").values_list("workflow_id", flat=True)
        return [(wid, wid) for wid in ids.distinct()[:200]]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(workflow_id=self.value()) if self.value() else queryset


class PrettyJSONField(GatedJSONFormField):
    """A gated JSON form field shown indented in a tall textarea."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 24, "cols": 100, "spellcheck": "false"}))
        super().__init__(*args, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return json.dumps(value, indent=2, ensure_ascii=False, cls=self.encoder)


class ServiceRefused(Exception):
    """A service refused an admin write; carries the refusal to the re-shown form."""

    def __init__(self, error: ApplicationError) -> None:
        super().__init__(error.message)
        self.error = error


def service_call[T](fn: Callable[..., T], /, **kwargs: Any) -> T:
    """Call a service from an admin write; a refusal becomes `ServiceRefused`."""
    try:
        return fn(**kwargs)
    except ApplicationError as exc:
        raise ServiceRefused(exc) from exc


def refusal_lines(error: ApplicationError) -> list[str]:
    """The refusal as staff read it: `message (code)`, then each validator issue or field error."""
    lines = [f"{error.message} ({error.code})"]
    issues = error.extra.get("errors")
    if isinstance(issues, list):
        for issue in issues[:ISSUES_SHOWN]:
            if isinstance(issue, Mapping):
                where = f" at {issue['node_id']}" if issue.get("node_id") else ""
                edge = f" (edge {issue['edge_id']})" if issue.get("edge_id") else ""
                lines.append(f"{issue.get('code')}{where}{edge}: {issue.get('message')}")
        if len(issues) > ISSUES_SHOWN:
            lines.append(f"… and {len(issues) - ISSUES_SHOWN} more")
    return lines


def _field_errors(error: ApplicationError) -> dict[str, list[str]]:
    fields = error.extra.get("fields")
    if not isinstance(fields, Mapping):
        return {}
    out: dict[str, list[str]] = {}
    for name, problems in fields.items():
        # A service names patch fields `patch.<field>`; the form names them `<field>`.
        field = str(name).removeprefix("patch.")
        out[field] = [str(p) for p in problems] if isinstance(problems, list | tuple) else [str(problems)]
    return out


class ServiceAdmin(admin.ModelAdmin):
    """A model admin whose writes go through services (see the module docstring).

    Subclasses call services with `service_call` in `save_model`/`delete_model`; `refusal_fields` maps
    an error code to the form field its message belongs on (default: the form's non-field errors).
    """

    refusal_fields: Mapping[str, str] = {}

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ServiceRefused as refused:
            # The refused write rolled back with the admin's transaction; validate the same input
            # again with the refusal attached, which shows the form with the staff's input and no save.
            request._service_refusal = refused.error  # type: ignore[attr-defined]
            return super().changeform_view(request, object_id, form_url, extra_context)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form_class = super().get_form(request, obj, change, **kwargs)
        found: ApplicationError | None = getattr(request, "_service_refusal", None)
        if found is None:
            return form_class
        refusal = found
        by_code = self.refusal_fields.get(refusal.code)

        class RefusedForm(form_class):  # type: ignore[misc, valid-type]
            def clean(self) -> Any:
                cleaned = super().clean()
                placed = False
                for field, problems in _field_errors(refusal).items():
                    target = field if field in self.fields else None
                    for problem in problems:
                        self.add_error(target, problem)
                    placed = placed or target is not None
                lines = refusal_lines(refusal)
                if placed:
                    self.add_error(None, lines[0])
                else:
                    target = by_code if by_code in self.fields else None
                    for line in lines:
                        self.add_error(target, line)
                return cleaned

        return RefusedForm

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        try:
            return super().delete_view(request, object_id, extra_context)
        except ServiceRefused as refused:
            for line in refusal_lines(refused.error):
                self.message_user(request, f"Not deleted: {line}", level=messages.ERROR)
            opts = self.model._meta
            return HttpResponseRedirect(
                reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[object_id])
            )

    def run_each(self, request: HttpRequest, rows: Any, fn: Callable[[Any], object], verb: str) -> int:
        """Run `fn` per selected row for an action; refusals are reported per row, the rest go on.
        Returns how many rows `fn` handled."""
        done = 0
        for row in rows:
            try:
                fn(row)
                done += 1
            except (ApplicationError, ServiceRefused) as exc:
                error = exc.error if isinstance(exc, ServiceRefused) else exc
                self.message_user(request, f"{row}: not {verb}: {refusal_lines(error)[0]}", messages.ERROR)
        return done


def search_json_text(queryset: QuerySet[Any], field: str, term: str) -> QuerySet[Any]:
    """Rows whose JSON column `field`, read as text, contains `term` (case-insensitive): staff search
    over message text stored inside JSON, the same on every database."""
    alias = f"{field}_as_text"
    return queryset.annotate(**{alias: Cast(field, output_field=TextField())}).filter(
        **{f"{alias}__icontains": term}
    )


@admin.register(LoginThrottle)
class LoginThrottleAdmin(ReadOnlyMixin, admin.ModelAdmin):
    """The kernel's own table: failed sign-in counters, read-only, with one action that lifts a lockout."""

    list_display = ("key", "failures", "last_failed_at", "locked_until")
    list_filter = ("locked_until",)
    search_fields = ("key",)
    readonly_fields = ("key", "failures", "last_failed_at", "locked_until")
    actions = ["lift_lockout"]

    @admin.action(description="Lift the lockout and forget the failures")
    def lift_lockout(self, request: HttpRequest, queryset: QuerySet[LoginThrottle]) -> None:
        lifted = logins.login_lockouts_lift(keys=list(queryset.values_list("key", flat=True)))
        self.message_user(request, f"Lifted {lifted} lockout(s).", messages.SUCCESS)
