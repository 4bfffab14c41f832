"""The two keyset orders: every row once, in order, and cursors refused when foreign or malformed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model

from graphs.models import Workflow
from opencompany.core.errors import ApplicationError
from opencompany.core.pagination import Ascending, NewestFirst, make_cursor

pytestmark = pytest.mark.django_db

User = get_user_model()


def _walk(pages, queryset, size):
    seen, cursor, count = [], None, 0
    while True:
        page = pages.page(queryset, cursor=cursor, size=size)
        seen.append([row.pk for row in page.rows])
        count += 1
        if page.next_cursor is None:
            return seen, count
        cursor = page.next_cursor


def test_newest_first_returns_every_row_once_newest_first_with_ties_broken_by_pk(owner):
    for n in range(7):
        Workflow.objects.create(owner=owner, name=f"w{n}", graph={})
    noon = datetime(2026, 1, 1, 12, tzinfo=UTC)
    ids = sorted(Workflow.objects.values_list("pk", flat=True))
    Workflow.objects.filter(pk__in=ids[:4]).update(created_at=noon)  # four share one instant
    Workflow.objects.filter(pk__in=ids[4:]).update(created_at=noon - timedelta(hours=1))

    seen, count = _walk(NewestFirst(salt="t", bound_to=owner.pk), Workflow.objects.all(), 3)

    newest_first = sorted(ids[:4], reverse=True) + sorted(ids[4:], reverse=True)
    assert seen == [newest_first[0:3], newest_first[3:6], newest_first[6:7]]
    assert count == 3


def test_ascending_returns_every_row_once_in_order_of_its_column():
    users = [User.objects.create_user(username=f"u{n}") for n in range(5)]
    pks = [u.pk for u in users]

    seen, count = _walk(Ascending(field="id", salt="t", bound_to="users"), User.objects.all(), 2)

    assert seen == [pks[0:2], pks[2:4], pks[4:5]]
    assert count == 3


def test_an_exact_last_page_has_no_next_cursor():
    for n in range(2):
        User.objects.create_user(username=f"u{n}")

    page = Ascending(field="id", salt="t", bound_to="users").page(User.objects.all(), cursor=None, size=2)

    assert (len(page.rows), page.next_cursor) == (2, None)


@pytest.mark.parametrize(
    "position", [None, "x", [1], ["not a date", "wf_1"], ["2026-01-01T00:00:00+00:00", True]]
)
def test_newest_first_refuses_a_signed_cursor_of_the_wrong_form(position):
    token = make_cursor(salt="t", bound_to=1, position=position)
    pages = NewestFirst(salt="t", bound_to=1)

    if position is None:  # a cursor without a position starts from the top
        assert pages.page(Workflow.objects.all(), cursor=token, size=5).rows == []
        return
    with pytest.raises(ApplicationError) as err:
        pages.page(Workflow.objects.all(), cursor=token, size=5)
    assert err.value.code == "invalid_cursor"


@pytest.mark.parametrize("position", ["3", -1, True, 2.5, [3]])
def test_ascending_refuses_a_signed_cursor_of_the_wrong_form(position):
    token = make_cursor(salt="t", bound_to="users", position=position)

    with pytest.raises(ApplicationError) as err:
        Ascending(field="id", salt="t", bound_to="users").after(token)
    assert err.value.code == "invalid_cursor"


def test_a_cursor_of_another_listing_is_refused():
    token = Ascending(field="id", salt="t", bound_to="users").cursor_after(3)

    with pytest.raises(ApplicationError) as err:
        Ascending(field="id", salt="t", bound_to="others").after(token)
    assert err.value.code == "invalid_cursor"
