from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from graphs.constants import AGENT_NODE_TYPE, WORKFLOW_NAME_MAX
from graphs.models import Workflow
from graphs.specs import all_node_specs
from opencompany.core.api import ConfirmField, JSONInput, QueryInput, column_bounds
from opencompany.core.pagination import cursor_field, page_serializer


@extend_schema_field(
    {
        "type": "object",
        "description": "A graph `{graphVersion, nodes, edges}`; the normalizer checks each node and edge.",
        "properties": {
            "graphVersion": {"type": "integer"},
            "nodes": {"type": "array", "items": {"type": "object", "additionalProperties": {}}},
            "edges": {"type": "array", "items": {"type": "object", "additionalProperties": {}}},
        },
        "additionalProperties": {},
    }
)
class GraphField(serializers.JSONField):
    """A graph object `{graphVersion, nodes, edges}`; shape is checked by the normalizer."""

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            raise serializers.ValidationError("Expected a graph object with 'nodes' and 'edges'.")
        version = value.get("graphVersion", 0)
        if isinstance(version, bool) or not isinstance(version, int):
            raise serializers.ValidationError("'graphVersion' must be an integer.")
        for key in ("nodes", "edges"):
            if key in value and not isinstance(value[key], list):
                raise serializers.ValidationError(f"'{key}' must be a list.")
            if key in value and not all(isinstance(item, dict) for item in value[key]):
                raise serializers.ValidationError(f"Each of '{key}' must be an object.")
        return value


class WorkflowCreateInput(JSONInput):
    name = serializers.CharField(max_length=WORKFLOW_NAME_MAX)
    graph = GraphField(required=False)


class WorkflowSaveInput(JSONInput):
    name = serializers.CharField(max_length=WORKFLOW_NAME_MAX, required=False)
    graph = GraphField()
    expected_revision = serializers.IntegerField(
        **column_bounds(Workflow._meta.get_field("revision"), min_value=1)
    )


class ValidateInput(JSONInput):
    graph = GraphField(required=False)


class ImportInput(JSONInput):
    name = serializers.CharField(max_length=WORKFLOW_NAME_MAX)
    graph = GraphField()


def subagent_types() -> list[str]:
    """Node types that can be added under a team lead: agents with a Context that lead no team."""
    return [spec.type for spec in all_node_specs() if spec.requires_context and not spec.accepts_teammates]


class SubagentInput(JSONInput):
    type = serializers.ChoiceField(choices=[], required=False, default=AGENT_NODE_TYPE)
    label = serializers.CharField(max_length=200, required=False, allow_blank=True)  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read when used, so a node type registered after import is offered too.
        self.fields["type"].choices = subagent_types()  # type: ignore[attr-defined]


class IssueSerializer(serializers.Serializer):
    code = serializers.CharField()
    node_id = serializers.CharField(allow_null=True)
    message = serializers.CharField()


class ValidationReportSerializer(serializers.Serializer):
    # The field names are the API's; they shadow Serializer attributes only in the type stubs.
    errors = IssueSerializer(many=True)  # type: ignore[assignment]
    warnings = IssueSerializer(many=True)


class WorkflowSummarySerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    revision = serializers.IntegerField()
    generation = serializers.IntegerField()
    state = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class WorkflowSerializer(WorkflowSummarySerializer):
    graph = serializers.JSONField()
    warnings = serializers.ListField(child=serializers.DictField())
    aliases = serializers.DictField(child=serializers.CharField())
    validation = ValidationReportSerializer()
    context_archives_pending = serializers.IntegerField()


class WorkflowListQuery(QueryInput):
    cursor = cursor_field()
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)


WorkflowListSerializer = page_serializer("WorkflowPage", WorkflowSummarySerializer)


class DeploySerializer(serializers.Serializer):
    workflow_id = serializers.CharField()
    generation = serializers.IntegerField()
    state = serializers.CharField()
    started_at = serializers.DateTimeField(required=False)


class ResetSerializer(serializers.Serializer):
    workflow_id = serializers.CharField()
    generation = serializers.IntegerField()
    state = serializers.CharField()
    idempotent = serializers.BooleanField()
    hooks = serializers.DictField()


class ExportSerializer(serializers.Serializer):
    name = serializers.CharField()
    graph = serializers.JSONField()


class SubagentOutput(serializers.Serializer):
    graph = serializers.JSONField()
    node_id = serializers.CharField()
    context_node_id = serializers.CharField()
    revision = serializers.IntegerField()


class EraseInput(JSONInput):
    confirm = ConfirmField(message="Send true to confirm erasing all your data.")


class EraseOutput(serializers.Serializer):
    erased = serializers.DictField(help_text="Counts of what was deleted, per app.")
