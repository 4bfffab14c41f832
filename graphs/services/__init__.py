"""Workflow writes: create, save, delete, import, deploy, reset, add-subagent, and the archive outbox.

Every entry point owns its transaction, and every graph passes the limits check and the normalizer before
it is validated or stored.

Modules: `_common` (the write report, the limits check, normalization, the refusals), `crud` (create,
save, get, import, export, add-subagent), `erase` (workflow delete and the owner's erase-all),
`lifecycle` (deploy and reset: generations), `outbox` (enqueue and drain of the Context archive outbox),
`transfer` (ownership transfer). Import the public names from this package.
"""

from graphs.services._common import EMPTY_GRAPH, GraphWrite, clean_workflow_name, graph_normalize
from graphs.services.crud import (
    workflow_add_subagent,
    workflow_create,
    workflow_create_report,
    workflow_export,
    workflow_get,
    workflow_import,
    workflow_save,
)
from graphs.services.erase import owner_data_erase, workflow_delete
from graphs.services.lifecycle import workflow_deploy, workflow_reset
from graphs.services.outbox import outbox_drain, outbox_drain_due, outbox_next_due
from graphs.services.transfer import TRANSFERRED_EVENT, workflow_transfer

__all__ = [
    "EMPTY_GRAPH",
    "TRANSFERRED_EVENT",
    "GraphWrite",
    "clean_workflow_name",
    "graph_normalize",
    "outbox_drain",
    "outbox_drain_due",
    "outbox_next_due",
    "owner_data_erase",
    "workflow_add_subagent",
    "workflow_create",
    "workflow_create_report",
    "workflow_delete",
    "workflow_deploy",
    "workflow_export",
    "workflow_get",
    "workflow_import",
    "workflow_reset",
    "workflow_save",
    "workflow_transfer",
]
