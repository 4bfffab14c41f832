"""One sanitizer for everything that leaves its owner's reach: exports, graph responses,
deployment snapshots, logs.

By key name: a key is compared after lower-casing and removing non-alphanumerics, so `apiKey`,
`api_key` and `API-KEY` are one name. Secrets (credentials, anything named like a token or a key
except counters) and runtime state (memory contents, transcripts, chat history, provider bindings,
signatures) are dropped wherever they appear, at any depth (`sanitize_payload`).

By value, for exports: any string that looks like a secret (a provider key prefix such as `sk-`,
`ghp_`, `xoxb-`, `AKIA`; a JWT; a private key block; a bearer token; a password in a URL; a long
high-entropy token) is replaced by `[redacted]` wherever it sits, inside a system prompt included
(`redact_secret_values`, `sanitize_export`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
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
        "cookies",
        "sessionid",
        "auth",
        "bearer",
        "pwd",
        "passphrase",
        "dsn",
        "jwt",
        "headers",
        "memory",
        "memories",
        "transcripts",
        "chathistory",
        "history",
    }
)
BLOCKED_SUFFIXES = (
    "providerstate",
    "replaypayload",
    "journalpayload",
    "bindingpayload",
    "token",
    "signature",
    "key",  # openai_key, signing_key, private_key, anthropicKey
    "auth",  # X-Auth, basic_auth, proxyAuth
    "pwd",
    "passphrase",
    "dsn",
    "jwt",
    "cookies",
    "transcripts",
    "history",  # chat_history, message_history
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
    "passphrase",
    "password",
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


REDACTED = "[redacted]"

# Secrets recognized by their shape. Each match is replaced, the text around it kept.
_SECRET_SHAPES = re.compile(
    "|".join(
        [
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
            r"\bsk-[A-Za-z0-9_\-]{16,}",  # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-)
            r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
            r"\bgh[pousr]_[A-Za-z0-9]{30,}",  # GitHub
            r"\bgithub_pat_[A-Za-z0-9_]{30,}",
            r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",  # Slack
            r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
            r"\bAIza[0-9A-Za-z_\-]{35}",  # Google API keys
            r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",  # JWT
            r"\b[Bb][Ee][Aa][Rr][Ee][Rr]\s+[A-Za-z0-9._~+/\-]{16,}=*",
            r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)",  # user:password in a URL (a DSN)
        ]
    )
)
_LONG_TOKEN = re.compile(r"[A-Za-z0-9+/_\-]{32,}={0,2}")


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _looks_random(token: str) -> bool:
    """A long token of mixed letters and digits with high entropy: an API key, not a word or an id.

    Mixed case and digits for base62/base64 keys; lower-case hex of 32 or more characters for hex keys.
    Our own ids (lower-case, 20 random characters) are shorter."""
    core = token.rstrip("=")
    has_digit = any(c.isdigit() for c in core)
    has_lower, has_upper = any(c.islower() for c in core), any(c.isupper() for c in core)
    if has_digit and has_lower and has_upper:
        return _entropy(core) >= 3.5
    is_hex = all(c in "0123456789abcdef" for c in core)
    return is_hex and has_digit and has_lower and _entropy(core) >= 3.0


def redact_secret_text(text: str) -> str:
    """`text` with every secret-shaped part replaced by `[redacted]`."""
    text = _SECRET_SHAPES.sub(REDACTED, text)
    return _LONG_TOKEN.sub(lambda m: REDACTED if _looks_random(m.group(0)) else m.group(0), text)


def redact_secret_values(value: Any) -> Any:
    """Deep copy of `value` with every string (keys and values) passed through `redact_secret_text`."""
    if isinstance(value, str):
        return redact_secret_text(value)
    if isinstance(value, dict):
        return {redact_secret_text(str(k)): redact_secret_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_secret_values(v) for v in value]
    return value


def sanitize_export(value: Any) -> Any:
    """What an export may carry: no blocked key, and no secret-shaped value anywhere."""
    return redact_secret_values(sanitize_payload(value))


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
