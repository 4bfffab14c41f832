"""One sanitizer for everything that leaves its owner's reach: exports, graph responses,
deployment snapshots, logs.

Key-name based: a key is compared after lower-casing and removing non-alphanumerics, so
`apiKey`, `api_key` and `API-KEY` are one name. Secrets (credentials, anything named like a token
except counters) and runtime state (memory contents, transcripts, provider bindings, signatures)
are dropped wherever they appear, at any depth.
"""

from __future__ import annotations

import re
from typing import Any

_NON_ALNUM = re.compile(r"[^a-z0-9]")

BLOCKED_EXACT = frozenset(
    {
        # runtime state
        "memorycontent",
        "memoryjsonl",
        "memoryitems",
        "recalledmemories",
        "recalledsecrets",
        "lastsessionid",
        "vertexinteractionid",
        "vertexenvironmentid",
        "contextjournal",
        "contextevents",
        "contextcheckpoint",
        "contextcheckpoints",
        "providerbinding",
        "providerbindings",
        "providerstate",
        "providersession",
        "runtimebinding",
        "runtimebindings",
        "rawcontext",
        "rawjournal",
        "rawtranscript",
        "transcript",
        "conversation",
        "messages",
        "notes",
        "activereplay",
        "replaystate",
        "replaypayload",
        "checkpointplustail",
        "signature",
        "thoughtsignature",
        "reasoningsignature",
        "encryptedreasoning",
        "encryptedcontent",
        "tokenusage",
        "executiontime",
        "lastexecution",
        "lastresult",
        # credentials
        "apikey",
        "accesstoken",
        "refreshtoken",
        "secret",
        "password",
        "passwd",
        "clientid",
        "clientsecret",
        "token",
        "bearertoken",
        "privatekey",
        "encryptionkey",
        "oauthtoken",
        "authtoken",
        "authorization",
        "credential",
        "credentials",
        "cookie",
        "sessionid",
    }
)
BLOCKED_SUFFIXES = (
    "providerstate",
    "replaypayload",
    "journalpayload",
    "bindingpayload",
    "token",
    "signature",
)
BLOCKED_SUBSTRINGS = (
    "apikey",
    "secret",
    "password",
    "privatekey",
    "accesstoken",
    "refreshtoken",
    "bearertoken",
    "oauthtoken",
    "authtoken",
    "credential",
)
# Counters and limits that merely mention tokens.
SAFE_NAMES = frozenset(
    {
        "maxtokens",
        "maxoutputtokens",
        "budgettokens",
        "thinkingbudgettokens",
        "pagetoken",
        "nextpagetoken",
        "tokencount",
        "totaltokens",
        "inputtokens",
        "outputtokens",
        "cachetokens",
        "cachereadtokens",
        "cachewritetokens",
        "tokensused",
    }
)


def normalized_key(name: str) -> str:
    return _NON_ALNUM.sub("", str(name).lower())


def is_blocked_key(name: str) -> bool:
    key = normalized_key(name)
    if key in SAFE_NAMES:
        return False
    if key in BLOCKED_EXACT:
        return True
    if any(key.endswith(s) for s in BLOCKED_SUFFIXES):
        return True
    return any(s in key for s in BLOCKED_SUBSTRINGS)


def sanitize_payload(value: Any) -> Any:
    """Deep copy of `value` without any blocked key, at any depth (lists included)."""
    if isinstance(value, dict):
        return {k: sanitize_payload(v) for k, v in value.items() if not is_blocked_key(k)}
    if isinstance(value, list):
        return [sanitize_payload(v) for v in value]
    if isinstance(value, tuple):
        return [sanitize_payload(v) for v in value]
    return value


def blocked_keys_in(value: Any, _path: str = "") -> list[str]:
    """Paths of blocked keys still present (for tests and assertions)."""
    found: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            here = f"{_path}.{k}" if _path else str(k)
            if is_blocked_key(k):
                found.append(here)
            found.extend(blocked_keys_in(v, here))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(blocked_keys_in(v, f"{_path}[{i}]"))
    return found
