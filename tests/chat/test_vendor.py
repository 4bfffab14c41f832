"""The vendored browser libraries are the files their README records: every listed file is there with its
SHA-256, each library has its licence, and nothing unlisted sits beside them."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

VENDOR = Path(__file__).resolve().parents[2] / "chat" / "static" / "vendor"


def recorded() -> dict[str, str]:
    text = (VENDOR / "README.md").read_text()
    block = text.split("## Checksums (SHA-256)", 1)[1].split("```")[1]
    return {name: digest for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", block, re.MULTILINE)}


def test_every_vendored_file_matches_its_recorded_checksum() -> None:
    listed = recorded()

    actual = {name: hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() for name in listed}

    assert actual == listed
    assert len(listed) == 9


def test_each_library_carries_its_licence_and_nothing_unlisted_is_vendored() -> None:
    listed = set(recorded())
    present = {str(p.relative_to(VENDOR)) for p in VENDOR.rglob("*") if p.is_file()} - {"README.md"}

    assert present == listed
    assert {name.split("/")[0] for name in listed if Path(name).name.startswith("LICENSE")} == {
        "marked",
        "dompurify",
        "highlight.js",
    }
