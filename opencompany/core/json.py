"""JSON helpers: the canonical form used for digests and fingerprints."""

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, non-ASCII kept: the same value always gives the same bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_bytes(value: Any) -> bytes:
    return canonical_json(value).encode("utf-8")


def fingerprint(value: Any) -> str:
    """sha256 hex of the canonical form."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


def json_size(value: Any) -> int:
    return len(canonical_bytes(value))
