"""The chat store: both implementations admit, refuse, replay and save drafts with the same rows and the
same answers (the portable one on every database, the PostgreSQL one in the PostgreSQL pass)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from typing import Any

import pytest
from django.db import DataError, connection, models, transaction
from django.utils import timezone

from chat import services
from chat.models import ChatMessage, ChatNote, ChatRun, ChatThread
from chat.stores import (
    WATCHDOG_LOCK_KEY,
    Admitted,
    ChatStore,
    PortableChatStore,
    PostgresChatStore,
    Refused,
    Replay,
    chat_store,
    chat_store_install,
)
from graphs import services as graph_services
from opencompany.core.events import chat_group
from opencompany.core.ids import mint_id
from tests.conftest import make_workflow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(
    params=[
        pytest.param(PostgresChatStore, marks=pytest.mark.postgres, id="postgres"),
        pytest.param(PortableChatStore, id="portable"),
    ]
)
def store(request: pytest.FixtureRequest) -> Iterator[ChatStore]:
    """Each implementation, installed as the chat's store for the test."""
    installed = chat_store()
    chosen: ChatStore = request.param()
    chat_store_install(chosen)
    yield chosen
    chat_store_install(installed)


def columns(instance: models.Model) -> dict[str, Any]:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def answered(workflow: Any, text: str = "first", client_message_id: str | None = None) -> Any:
    """A message and its finished answer: the thread exists and the lane is free."""
    admission = services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text=text, client_message_id=client_message_id
    )
    services.run_finish(
        run_id=admission.run.run_id, claimant=None, outcome="finished", text="an answer", seq=1
    )
    return admission


def admit(store: ChatStore, workflow: Any, **overrides: Any) -> Any:
    run_id, uid = mint_id("run"), mint_id("m")
    request: dict[str, Any] = {
        "workflow_id": workflow.pk,
        "owner_id": workflow.owner_id,
        "expected_revision": None,
        "run": {
            "run_id": run_id,
            "kind": ChatRun.Kind.MESSAGE,
            "user_message_uid": uid,
            "reply_message_uid": f"a_{run_id}",
        },
        "message": {
            "uid": uid,
            "role": ChatMessage.Role.USER,
            "text": "second",
            "run_id": run_id,
            "client_message_id": "c-2",
        },
    }
    request.update(overrides)
    return store.send_admit(**request)


def chat_rows() -> dict[str, Any]:
    return {
        "threads": list(ChatThread.objects.values_list("id", "active_leaf_uid", "revision")),
        "messages": list(ChatMessage.objects.order_by("id").values_list("uid", "parent_uid", "text")),
        "runs": list(ChatRun.objects.order_by("run_id").values_list("run_id", "state")),
    }


def test_an_admission_writes_the_message_and_the_run_it_returns_with_every_other_column_defaulted(
    store: ChatStore, workflow: Any
) -> None:
    first = answered(workflow)
    revision = ChatThread.objects.get(workflow=workflow).revision

    admitted = admit(store, workflow)

    message = ChatMessage.objects.get(uid=admitted.message.uid)
    run = ChatRun.objects.get(run_id=admitted.run.run_id)
    assert columns(admitted.message) == columns(message)
    assert columns(admitted.run) == columns(run)
    assert (admitted.message._state.adding, admitted.run._state.adding) == (False, False)
    assert (message.parent_uid, message.generation, message.client_message_id) == (
        first.run.reply_message_uid,
        1,
        "c-2",
    )
    assert (message.kind, message.status, message.meta, message.error_code, message.error_message) == (
        "text",
        "complete",
        {},
        "",
        "",
    )
    assert (run.state, run.claimant, run.last_seq, run.heartbeat_at, run.started_at) == (
        "queued",
        "",
        0,
        None,
        None,
    )
    assert (run.context_cursors, run.draft_text, run.draft_steps, run.usage, run.parent_run_id) == (
        {},
        "",
        [],
        {},
        "",
    )
    assert (run.workflow_id, run.thread_id, run.generation) == (workflow.pk, message.thread_id, 1)
    thread = ChatThread.objects.get(workflow=workflow)
    assert (thread.active_leaf_uid, thread.revision, admitted.revision) == (
        message.uid,
        revision + 1,
        revision + 1,
    )


def test_an_admission_writes_the_claim_columns_it_is_given(store: ChatStore, workflow: Any) -> None:
    answered(workflow)
    run_id, uid = mint_id("run"), mint_id("m")
    claim = {"state": "running", "claimant": "here:1:abc", "last_seq": 1}

    admitted = admit(
        store,
        workflow,
        run={
            "run_id": run_id,
            "kind": "message",
            "user_message_uid": uid,
            "reply_message_uid": f"a_{run_id}",
            **claim,
        },
        message={"uid": uid, "role": "user", "text": "claimed", "run_id": run_id},
    )

    run = ChatRun.objects.get(run_id=run_id)
    assert (run.state, run.claimant, run.last_seq) == ("running", "here:1:abc", 1)
    assert columns(admitted.run) == columns(run)
    assert ChatMessage.objects.get(uid=uid).client_message_id == ""


@pytest.fixture(params=["alone", "in a transaction"])
def within(request: pytest.FixtureRequest) -> Callable[[], AbstractContextManager[Any]]:
    """Where an admission runs: on its own (as a send does), or inside a caller's transaction."""
    return nullcontext if request.param == "alone" else transaction.atomic


type Fault = Callable[[Any, Any], tuple[dict[str, Any], Refused | None]]


def _foreign_owner(workflow: Any, other_owner: Any) -> tuple[dict[str, Any], Refused | None]:
    return {"owner_id": other_owner.pk}, Refused("not_found")


def _not_live(workflow: Any, other_owner: Any) -> tuple[dict[str, Any], Refused | None]:
    graph_services.workflow_reset(workflow=workflow, actor=workflow.owner)
    return {}, Refused("not_running")


def _lane_taken(workflow: Any, other_owner: Any) -> tuple[dict[str, Any], Refused | None]:
    live = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="still answering")
    return {}, Refused("run_in_progress", {"run_id": live.run.run_id})


def _client_id_taken(workflow: Any, other_owner: Any) -> tuple[dict[str, Any], Refused | None]:
    answered(workflow, "again", client_message_id="c-2")
    return {}, None  # a replay


def _stale_revision(workflow: Any, other_owner: Any) -> tuple[dict[str, Any], Refused | None]:
    revision = ChatThread.objects.get(workflow=workflow).revision
    return {"expected_revision": revision - 1}, Refused("revision_conflict", {"current_revision": revision})


@pytest.mark.parametrize("case", [_foreign_owner, _not_live, _lane_taken, _stale_revision])
def test_an_admission_outside_the_common_case_answers_why_and_writes_nothing(
    store: ChatStore, workflow: Any, other_owner: Any, within: Any, case: Fault
) -> None:
    answered(workflow)
    overrides, refusal = case(workflow, other_owner)
    before = chat_rows()

    with within():
        answer = admit(store, workflow, **overrides)

    assert answer == refusal
    assert chat_rows() == before


def test_an_admission_of_a_client_id_the_thread_holds_answers_that_message_and_writes_nothing(
    store: ChatStore, workflow: Any, within: Any
) -> None:
    first = answered(workflow, "again", client_message_id="c-2")
    before = chat_rows()

    with within():
        answer = admit(store, workflow)

    assert isinstance(answer, Replay)
    assert columns(answer.message) == columns(ChatMessage.objects.get(uid=first.message.uid))
    assert columns(answer.run) == columns(ChatRun.objects.get(run_id=first.run.run_id))
    assert answer.revision == ChatThread.objects.get(workflow=workflow).revision
    assert chat_rows() == before


@pytest.mark.parametrize(
    ("faults", "first_fault"),
    [
        ((_foreign_owner, _not_live), "not_found"),
        ((_not_live, _client_id_taken), "not_running"),
        ((_client_id_taken, _stale_revision), "replay"),
        ((_stale_revision, _lane_taken), "revision_conflict"),
    ],
)
def test_an_admission_answers_the_first_fault_in_the_order_of_its_checks(
    store: ChatStore, workflow: Any, other_owner: Any, faults: tuple[Fault, Fault], first_fault: str
) -> None:
    answered(workflow)
    overrides: dict[str, Any] = {}
    for fault in reversed(faults):  # the later fault first, so the earlier one's setup stays true
        overrides.update(fault(workflow, other_owner)[0])
    before = chat_rows()

    answer = admit(store, workflow, **overrides)

    assert (answer.code if isinstance(answer, Refused) else type(answer).__name__.lower()) == first_fault
    assert chat_rows() == before


def test_a_chats_first_message_opens_the_chat_with_every_column_defaulted_and_is_admitted(
    store: ChatStore, workflow: Any, within: Any
) -> None:
    with within():
        answer = admit(store, workflow)

    assert isinstance(answer, Admitted)
    thread = ChatThread.objects.get(workflow=workflow)
    assert (thread.home_workflow_id, thread.title, thread.active_leaf_uid, thread.revision) == (
        workflow.pk,
        "",
        answer.message.uid,
        1,
    )
    assert thread.archived_at is None
    assert (answer.revision, answer.message.parent_uid) == (1, "")
    assert (answer.message.thread_id, answer.run.thread_id) == (thread.pk, thread.pk)
    assert columns(answer.message) == columns(ChatMessage.objects.get(uid=answer.message.uid))
    assert ChatThread.objects.filter(home_workflow=workflow).count() == 1


def test_a_chat_is_opened_again_after_new_chat_archived_the_current_one(
    store: ChatStore, workflow: Any, within: Any
) -> None:
    answered(workflow)
    services.chat_archive(workflow=workflow)

    with within():
        answer = admit(store, workflow)

    assert isinstance(answer, Admitted)
    assert ChatThread.objects.filter(home_workflow=workflow).count() == 2
    current = ChatThread.objects.get(workflow=workflow)
    assert (current.revision, current.active_leaf_uid, answer.message.parent_uid) == (
        1,
        answer.message.uid,
        "",
    )


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("foreign owner", "not_found"),
        ("not deployed", "not_running"),
        ("reset", "not_running"),
        ("unknown", "not_found"),
    ],
)
def test_no_chat_is_opened_for_another_owner_or_a_workflow_that_is_not_live(
    store: ChatStore, workflow: Any, other_owner: Any, within: Any, case: str, code: str
) -> None:
    overrides: dict[str, Any] = {}
    if case == "foreign owner":
        overrides["owner_id"] = other_owner.pk
    elif case == "not deployed":
        overrides["workflow_id"] = make_workflow(workflow.owner, deploy=False, name="Draft").pk
    elif case == "reset":
        graph_services.workflow_reset(workflow=workflow, actor=workflow.owner)
    else:
        overrides["workflow_id"] = "wf_" + "x" * 60

    with within():
        answer = admit(store, workflow, **overrides)

    assert answer == Refused(code)
    assert not ChatThread.objects.exists()
    assert not ChatRun.objects.exists()


@pytest.mark.postgres
def test_on_postgresql_a_chats_first_message_takes_three_statements(
    workflow: Any, django_assert_num_queries: Any
) -> None:
    # The admission finds no chat, the chat is opened, the admission runs again.
    with django_assert_num_queries(3):
        services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="hello")


@pytest.mark.postgres
def test_on_postgresql_inside_a_callers_transaction_the_chat_is_locked_then_the_send_admitted(
    workflow: Any, django_assert_num_queries: Any
) -> None:
    answered(workflow)

    with transaction.atomic(), django_assert_num_queries(2):
        answer = admit(PostgresChatStore(), workflow)

    assert isinstance(answer, Admitted)
    assert ChatThread.objects.get(workflow=workflow).active_leaf_uid == answer.message.uid


@pytest.mark.postgres
@pytest.mark.parametrize("writer", ["answers", "ends without a reply"])
def test_on_postgresql_a_send_that_waited_for_the_writer_ending_the_run_is_admitted_after_it(
    store: ChatStore, workflow: Any, within: Any, writer: str
) -> None:
    import psycopg

    from tests import live

    first = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="first")
    thread = ChatThread.objects.get(workflow=workflow)
    reply = f"a_{first.run.run_id}"
    answers: list[Any] = []

    def send() -> None:
        try:
            with within():
                answers.append(admit(store, workflow))
        finally:
            connection.close()

    with psycopg.connect(live.test_database_url()) as other:
        # A run's end as `run_finish` writes it: the thread locked first, then the run ended, with
        # or without its reply becoming the leaf.
        other.execute("SELECT 1 FROM chat_chatthread WHERE id = %s FOR UPDATE", [thread.pk])
        other.execute("UPDATE chat_chatrun SET state = 'finished' WHERE run_id = %s", [first.run.run_id])
        if writer == "answers":
            other.execute(_reply_sql(), {"uid": reply, "question": first.message.uid})
            other.execute(
                "UPDATE chat_chatthread SET revision = revision + 1, active_leaf_uid = %s WHERE id = %s",
                [reply, thread.pk],
            )
        sender = threading.Thread(target=send)
        sender.start()
        waited = _wait_for_a_lock_wait()
        other.commit()
        sender.join(timeout=10)

    assert waited is True
    assert len(answers) == 1
    assert isinstance(answers[0], Admitted)
    assert ChatThread.objects.get(pk=thread.pk).active_leaf_uid == answers[0].message.uid
    assert answers[0].message.parent_uid == (reply if writer == "answers" else first.message.uid)


def _reply_sql() -> str:
    """An answer to the message `%(question)s`, copied from it, with the uid `%(uid)s`."""
    names = [str(f.column) for f in ChatMessage._meta.concrete_fields if f.column != "id"]
    values = {"uid": "%(uid)s", "parent_uid": "uid", "role": "'assistant'"}
    select = ", ".join(values.get(name, name) for name in names)
    return f"INSERT INTO chat_chatmessage ({', '.join(names)}) SELECT {select} FROM chat_chatmessage WHERE uid = %(question)s"  # noqa: S608


def _wait_for_a_lock_wait() -> bool:
    """Whether a session of the test database comes to wait for a lock within five seconds."""
    import psycopg

    from tests import live

    deadline = time.monotonic() + 5
    with psycopg.connect(live.test_database_url(), autocommit=True) as watcher:
        while time.monotonic() < deadline:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if row and row[0]:
                return True
            time.sleep(0.02)
    return False


def test_a_message_hangs_at_the_root_when_the_leaf_is_of_an_older_generation(
    store: ChatStore, workflow: Any
) -> None:
    answered(workflow)
    graph_services.workflow_reset(workflow=workflow, actor=workflow.owner)
    graph_services.workflow_deploy(workflow=workflow, actor=workflow.owner)

    admitted = admit(store, workflow)

    message = ChatMessage.objects.get(uid=admitted.message.uid)
    assert (message.parent_uid, message.generation, admitted.run.generation) == ("", 2, 2)


def test_a_send_through_either_store_answers_and_publishes_the_same(
    store: ChatStore, workflow: Any, events: Any
) -> None:
    answered(workflow)
    events.subscribe(chat_group(workflow.pk))
    events.drain()

    admission = services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="second", client_message_id="c-2"
    )
    again = services.chat_send(
        owner_id=workflow.owner_id, workflow_id=workflow.pk, text="second", client_message_id="c-2"
    )

    thread = ChatThread.objects.get(workflow=workflow)
    assert (admission.created, again.created) == (True, False)
    assert again.message.uid == admission.message.uid
    assert admission.revision == thread.revision
    assert events.drain() == [
        {
            "type": "thread.updated",
            "data": {"workflow_id": workflow.pk, "revision": thread.revision, "role": "user"},
        }
    ]


def test_a_draft_is_saved_only_for_its_claimant_while_the_run_is_live(
    store: ChatStore, workflow: Any
) -> None:
    run_id = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="hello").run.run_id
    claimant = services.new_claimant()
    services.run_claim(run_id=run_id, claimant=claimant)
    steps = [{"id": "c1", "name": "memory", "state": "done", "note": 'a "quoted" \\ step'}]
    now = timezone.now()

    saved = store.draft_save(run_id=run_id, claimant=claimant, text="Half an", steps=steps, seq=4, now=now)
    stale = store.draft_save(run_id=run_id, claimant="someone-else", text="x", steps=[], seq=9, now=now)

    run = ChatRun.objects.get(run_id=run_id)
    assert (saved, stale) == (True, False)
    assert (run.draft_text, run.draft_steps, run.last_seq, run.heartbeat_at) == ("Half an", steps, 4, now)

    services.run_finish(run_id=run_id, claimant=claimant, outcome="finished", text="Half an answer", seq=5)
    ended = store.draft_save(run_id=run_id, claimant=claimant, text="late", steps=[], seq=9, now=now)

    assert ended is False
    assert ChatRun.objects.get(run_id=run_id).draft_text == "Half an answer"


def test_a_run_lock_answers_the_thread_and_the_live_run_as_the_orm_loads_them(
    store: ChatStore, workflow: Any
) -> None:
    run_id = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="hello").run.run_id
    claimant = services.new_claimant()
    services.run_claim(run_id=run_id, claimant=claimant)
    ChatRun.objects.filter(run_id=run_id).update(
        context_cursors={"agent": {"length": 2, "digest": "d"}},
        draft_steps=[{"id": "c1", "state": "done"}],
        usage={"input_tokens": 3},
        draft_text='a "quoted" \\ draft',
    )

    with transaction.atomic():
        locked = store.run_lock(run_id=run_id, claimant=claimant)
        unclaimed = store.run_lock(run_id=run_id, claimant=None)
        not_theirs = store.run_lock(run_id=run_id, claimant="someone-else")
        unknown = store.run_lock(run_id="run_unknown", claimant=None)

    assert locked is not None
    assert unclaimed is not None
    thread, run = locked
    assert columns(thread) == columns(ChatThread.objects.get(workflow=workflow))
    assert columns(run) == columns(ChatRun.objects.get(run_id=run_id))
    assert (thread._state.adding, run._state.adding) == (False, False)
    assert columns(unclaimed[1]) == columns(run)
    assert (not_theirs, unknown) == (None, None)
    assert (store.run_state(run_id=run_id), store.run_state(run_id="run_unknown")) == ("running", None)

    services.run_finish(run_id=run_id, claimant=claimant, outcome="finished", text="An answer", seq=5)
    with transaction.atomic():
        ended = store.run_lock(run_id=run_id, claimant=None)

    assert ended is None
    assert store.run_state(run_id=run_id) == "finished"


@pytest.mark.postgres
def test_on_postgresql_a_run_lock_holds_the_thread_and_the_run_rows_until_the_transaction_ends(
    store: ChatStore, workflow: Any
) -> None:
    import psycopg

    from tests import live

    run_id = services.chat_send(owner_id=workflow.owner_id, workflow_id=workflow.pk, text="hello").run.run_id
    thread_id = ChatRun.objects.get(run_id=run_id).thread_id
    with psycopg.connect(live.test_database_url(), autocommit=True) as other:

        def free(sql: str, key: Any) -> bool:
            try:
                other.execute(sql, [key])
            except psycopg.errors.LockNotAvailable:
                return False
            return True

        thread_sql = "SELECT 1 FROM chat_chatthread WHERE id = %s FOR UPDATE NOWAIT"
        run_sql = "SELECT 1 FROM chat_chatrun WHERE run_id = %s FOR UPDATE NOWAIT"
        with transaction.atomic():
            assert store.run_lock(run_id=run_id, claimant=None) is not None
            held = (free(thread_sql, thread_id), free(run_sql, run_id))
        after = (free(thread_sql, thread_id), free(run_sql, run_id))

    assert held == (False, False)
    assert after == (True, True)


def test_notes_are_claimed_oldest_first_up_to_the_limit_and_told_unless_changed_after_the_claim(
    store: ChatStore, workflow: Any
) -> None:
    answered(workflow)
    thread = ChatThread.objects.get(workflow=workflow)
    start = timezone.now()
    for i, text in enumerate(['third "quoted"', "first", "second", "fourth"]):
        order = {'third "quoted"': 2, "first": 0, "second": 1, "fourth": 3}[text]
        ChatNote.objects.create(
            thread=thread, key=f"k{i}", kind="rating", text=text, updated_at=start + timedelta(seconds=order)
        )
    claim_time = start + timedelta(minutes=1)

    with transaction.atomic():
        claimed = store.notes_claim(thread_id=thread.pk, run_id="run_a", limit=3, now=claim_time)
    with transaction.atomic():
        again = store.notes_claim(thread_id=thread.pk, run_id="run_a", limit=3, now=claim_time)
    ChatNote.objects.filter(text="second").update(updated_at=claim_time + timedelta(seconds=1))
    told = store.notes_deliver(run_id="run_a", now=claim_time + timedelta(seconds=2))
    none_told = store.notes_deliver(run_id="run_unknown", now=claim_time)

    assert claimed == ["first", "second", 'third "quoted"']
    assert again == claimed
    assert (told, none_told) == (2, 0)
    assert dict(ChatNote.objects.values_list("text", "claimed_run_id")) == {
        "first": "run_a",
        "second": "run_a",
        'third "quoted"': "run_a",
        "fourth": "",
    }
    assert sorted(ChatNote.objects.filter(delivered_at__isnull=False).values_list("text", flat=True)) == [
        "first",
        'third "quoted"',
    ]
    with transaction.atomic():
        assert store.notes_claim(thread_id=thread.pk, run_id="run_b", limit=8, now=claim_time) == [
            "fourth",
            "second",  # changed after the first claim: oldest first by when it last changed
        ]


def test_the_installed_store_fits_the_default_database(on_postgres: bool) -> None:
    assert type(chat_store()) is (PostgresChatStore if on_postgres else PortableChatStore)


def test_a_column_the_store_decides_cannot_be_supplied(store: ChatStore, workflow: Any) -> None:
    answered(workflow)
    before = chat_rows()

    with pytest.raises(TypeError):
        admit(store, workflow, message={"uid": "m_x", "role": "user", "text": "x", "parent_uid": "elsewhere"})

    assert chat_rows() == before


@pytest.mark.postgres
def test_an_over_long_value_is_refused_whole_never_cut_short(store: ChatStore, workflow: Any) -> None:
    answered(workflow)
    before = chat_rows()
    run_id, uid = mint_id("run"), mint_id("m")

    with pytest.raises(DataError):
        admit(
            store,
            workflow,
            run={
                "run_id": run_id,
                "kind": "message",
                "user_message_uid": uid,
                "reply_message_uid": f"a_{run_id}",
                "claimant": "x" * 121,
            },
            message={"uid": uid, "role": "user", "text": "long claimant", "run_id": run_id},
        )

    assert chat_rows() == before


def test_the_sweep_lock_is_free_between_sweeps_and_taken_again_after_one(store: ChatStore) -> None:
    with store.sweep_lock() as held:
        assert held is True
    with store.sweep_lock() as again:  # released when the block ended
        assert again is True


@pytest.mark.postgres
def test_on_postgresql_the_sweep_lock_answers_false_while_another_connection_holds_it() -> None:
    import psycopg

    from tests import live

    with psycopg.connect(live.test_database_url(), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [WATCHDOG_LOCK_KEY])
        with PostgresChatStore().sweep_lock() as held:
            assert held is False
        other.execute("SELECT pg_advisory_unlock(%s)", [WATCHDOG_LOCK_KEY])
    with PostgresChatStore().sweep_lock() as held:
        assert held is True
