"""Registries other apps plug into from `AppConfig.ready()`.

- Context archivers: called by the outbox drain with `(workflow_id, owner_id, context_node_id, reason)`;
  they archive that workflow's stored conversations and must be idempotent (a retried drain calls them
  again). Return a small JSON-safe dict of counts.
- Reset hooks: called inside Reset's transaction with a `ResetContext`; return a JSON-safe dict of
  what they did, recorded on the closed deployment's `reset_report`.
- Erasers: called inside the transaction that deletes workflows with `(owner_id, workflow_ids)`
  (`workflow_ids=None`: everything the owner has, workflows gone earlier included); they delete every
  row they keep for those workflows, content and history alike. Return a JSON-safe dict of counts.
- Owner-change hooks: called inside `workflow_transfer`'s transaction (the workflow row locked)
  with an `OwnerChange`; each moves what its app keys by the workflow's owner to the new owner, or
  raises an `ApplicationError` to refuse the change (everything rolls back). Return a JSON-safe dict
  of counts.
- Inventories: called with `(owner_id, workflow_ids)` (read only); each returns `InventoryLine`s, what its
  app keeps for those workflows, counted, so a transfer and a delete can say what they move or erase
  before they do it. Every row an eraser deletes or an owner-change hook moves is counted by some line.
- Runtime checks: called with an agent node's parameters; return None when the runtime it names can
  answer on this server, else a sentence saying what is missing. Deploy refuses an agent that cannot
  answer (`graphs.readiness`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ResetContext:
    workflow_id: str
    owner_id: int
    generation: int
    graph: dict[str, Any]


@dataclass(frozen=True)
class OwnerChange:
    workflow_id: str
    old_owner_id: int
    new_owner_id: int


@dataclass(frozen=True)
class InventoryLine:
    """`count` rows of one kind (`key`, stable; `label`, what staff read), kept by `app`."""

    app: str
    key: str
    label: str
    count: int


ContextArchiver = Callable[..., dict[str, Any]]
ResetHook = Callable[[ResetContext], dict[str, Any]]
Eraser = Callable[..., dict[str, int]]
OwnerChangeHook = Callable[[OwnerChange], dict[str, Any]]
Inventory = Callable[..., list[InventoryLine]]
RuntimeCheck = Callable[[dict[str, Any]], str | None]

_archivers: dict[str, ContextArchiver] = {}
_reset_hooks: dict[str, ResetHook] = {}
_erasers: dict[str, Eraser] = {}
_owner_change_hooks: dict[str, OwnerChangeHook] = {}
_inventories: dict[str, Inventory] = {}
_runtime_checks: dict[str, RuntimeCheck] = {}


def register_context_archiver(name: str, archiver: ContextArchiver) -> None:
    _archivers[name] = archiver


def register_reset_hook(name: str, hook: ResetHook) -> None:
    _reset_hooks[name] = hook


def register_eraser(name: str, eraser: Eraser) -> None:
    _erasers[name] = eraser


def erasers() -> dict[str, Eraser]:
    return dict(_erasers)


def context_archivers() -> dict[str, ContextArchiver]:
    return dict(_archivers)


def reset_hooks() -> dict[str, ResetHook]:
    return dict(_reset_hooks)


def register_owner_change_hook(name: str, hook: OwnerChangeHook) -> None:
    _owner_change_hooks[name] = hook


def owner_change_hooks() -> dict[str, OwnerChangeHook]:
    return dict(_owner_change_hooks)


def register_inventory(name: str, inventory: Inventory) -> None:
    _inventories[name] = inventory


def inventories() -> dict[str, Inventory]:
    return dict(_inventories)


def register_runtime_check(name: str, check: RuntimeCheck) -> None:
    _runtime_checks[name] = check


def runtime_checks() -> dict[str, RuntimeCheck]:
    return dict(_runtime_checks)
