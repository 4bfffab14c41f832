"""Confirmation pages for the admin's destructive actions.

An action that erases or moves rows first answers with a page that says, with counts, everything it
will touch, the rows its service erases beyond the foreign-key cascade included; only the page's
"Yes" (`confirm=yes`, posted with the same selection) runs it. The counts come from the apps'
inventory selectors, read when the page is drawn.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.contrib.admin import helpers
from django.http import HttpRequest
from django.template.response import TemplateResponse

CONFIRM_FIELD = "confirm"

# (label, count): one line of a confirmation page.
type Count = tuple[str, int]


@dataclass(frozen=True)
class Group:
    """What the action does to one selected row: a heading and its counted lines."""

    heading: str
    lines: Sequence[Count]


@dataclass(frozen=True)
class Confirmation:
    """The page: what is asked, what each selected row loses, the totals and what stays untouched."""

    title: str
    intro: str
    groups: Sequence[Group]
    submit: str
    notes: Sequence[str] = field(default_factory=tuple)
    possible: bool = True  # False: nothing to do; the page offers only the way back

    @property
    def totals(self) -> list[Count]:
        """Each label's count summed over the groups, in first-seen order."""
        totals: dict[str, int] = {}
        for group in self.groups:
            for label, count in group.lines:
                totals[label] = totals.get(label, 0) + count
        return list(totals.items())


def confirmed(request: HttpRequest) -> bool:
    """Whether the request is the confirmation page's "Yes"."""
    return request.POST.get(CONFIRM_FIELD) == "yes"


def confirmation_page(
    modeladmin: Any,
    request: HttpRequest,
    *,
    action: str,
    selected: Iterable[Any],
    confirmation: Confirmation,
) -> TemplateResponse:
    """The page asking to confirm `action` on the `selected` primary keys (posted back with "Yes")."""
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": confirmation.title,
        "opts": opts,
        "confirmation": confirmation,
        "totals": confirmation.totals,
        "selected": [str(pk) for pk in selected],
        "action": action,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "select_across": request.POST.get("select_across", "0"),
    }
    return TemplateResponse(request, "admin/confirm_action.html", context)
