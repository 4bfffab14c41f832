"""Input and output shapes of the Memory API. Limits come from `memory.fields`; unknown fields are refused."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory import fields as f
from opencompany.core.api import ConfirmField, JSONInput, QueryInput, column_bounds
from opencompany.core.pagination import cursor_field, page_serializer

_VERSION = column_bounds(f.VERSION_COLUMN, min_value=1)


class StrictSerializer(JSONInput):
    """Refuses fields it does not declare, so a typo or a scope field never passes silently."""


@extend_schema_field(
    {
        "type": "string",
        "pattern": f.LABEL_PATTERN,
        "description": "Holds a character other than whitespace and control characters (a blank-looking "
        "tag is `invalid_request`); trimmed and lower-cased.",
    }
)
class TagField(serializers.CharField):
    """One tag; what makes it blank is the service's check (`memory.fields.clean_tags`)."""


def _tags(max_len: int) -> serializers.ListField:
    return serializers.ListField(
        child=TagField(max_length=max_len, trim_whitespace=False),
        max_length=f.TAGS_MAX_ITEMS,
        required=False,
    )


class RememberInput(StrictSerializer):
    content = serializers.CharField(max_length=f.CONTENT_MAX, trim_whitespace=False)
    title = serializers.CharField(max_length=f.TITLE_MAX, required=False, allow_null=True, allow_blank=True)
    category = serializers.CharField(
        max_length=f.CATEGORY_MAX, required=False, allow_null=True, allow_blank=True
    )
    tags = _tags(f.TAG_MAX)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)


class UpdateInput(StrictSerializer):
    min_properties = 2  # `expected_version` and at least one field to change
    expected_version = serializers.IntegerField(**_VERSION)
    # Blank content is refused with the service's words (it refuses whitespace-only content the same way).
    content = serializers.CharField(
        max_length=f.CONTENT_MAX, trim_whitespace=False, error_messages={"blank": "May not be blank."}
    )
    title = serializers.CharField(max_length=f.TITLE_MAX, required=False, allow_null=True, allow_blank=True)
    category = serializers.CharField(
        max_length=f.CATEGORY_MAX, required=False, allow_null=True, allow_blank=True
    )
    tags = _tags(f.PATCH_TAG_MAX)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["content"].required = False  # present → must be a non-null string


class ListQuery(QueryInput):
    query = serializers.CharField(
        max_length=f.QUERY_MAX, required=False, allow_blank=True, trim_whitespace=False
    )
    limit = serializers.IntegerField(min_value=1, max_value=f.LIMIT_MAX, required=False)
    cursor = cursor_field()


class ForgetQuery(QueryInput):
    expected_version = serializers.IntegerField(**_VERSION)


class PageQuery(QueryInput):
    limit = serializers.IntegerField(min_value=1, max_value=f.LIMIT_MAX, required=False)
    cursor = cursor_field()


class ClearInput(StrictSerializer):
    confirm = ConfirmField(message="Send true to confirm clearing every item.")


class MemoryItemOutput(serializers.Serializer):
    id = serializers.CharField()
    title = serializers.CharField(allow_null=True)
    content = serializers.CharField()
    category = serializers.CharField(allow_null=True)
    tags = serializers.ListField(child=serializers.CharField())
    version = serializers.IntegerField()
    expires_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    created_by = serializers.CharField()
    updated_by = serializers.CharField()
    indexing_state = serializers.CharField()


class ReceiptOutput(serializers.Serializer):
    operation_id = serializers.CharField(allow_null=True)
    applied = serializers.BooleanField()


class MutationOutput(serializers.Serializer):
    operation = serializers.CharField()
    memory = MemoryItemOutput()
    receipt = ReceiptOutput()


class RecallItemOutput(MemoryItemOutput):
    """An item in a list or recall page; recall adds why it matched."""

    score = serializers.FloatField(required=False)
    matched = serializers.ListField(child=serializers.CharField(), required=False)
    match = serializers.ChoiceField(choices=["all", "some", "fuzzy", "recent", "similar"], required=False)
    highlight = serializers.ListField(child=serializers.CharField(), required=False)


PageOutput = page_serializer(
    "MemoryPage",
    RecallItemOutput,
    retrieval=serializers.CharField(),
    degraded=serializers.CharField(allow_null=True),
)


class RevisionOutput(serializers.Serializer):
    memory_id = serializers.CharField()
    version = serializers.IntegerField()
    operation = serializers.CharField()
    title = serializers.CharField(allow_null=True)
    content = serializers.CharField(
        allow_null=True, help_text="null once the item is removed: its revisions keep no content."
    )
    category = serializers.CharField(allow_null=True)
    tags = serializers.ListField(child=serializers.CharField())
    expires_at = serializers.DateTimeField(allow_null=True)
    actor = serializers.CharField()
    created_at = serializers.DateTimeField()


RevisionPageOutput = page_serializer("RevisionPage", RevisionOutput)


class ClearOutput(serializers.Serializer):
    cleared = serializers.IntegerField()
    receipt = ReceiptOutput()
