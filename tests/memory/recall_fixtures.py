"""One set of items and queries for the recall tests on both databases."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from memory import services
from memory.scope import MemoryScope

ITEMS: list[dict[str, Any]] = [
    {
        "key": "espresso_title",
        "title": "Espresso preferences",
        "category": "food",
        "tags": ["coffee", "morning"],
        "content": "Owner drinks a double shot every day before standup.",
    },
    {
        "key": "espresso_content",
        "title": "Morning routine",
        "category": "habits",
        "tags": ["routine"],
        "content": "Starts the day with an espresso and a short walk around the block.",
    },
    {
        "key": "cafes",
        "title": "Cafe list",
        "category": "places",
        "tags": ["coffee-shops", "berlin"],
        "content": "Favourite places: Bonanza in Kreuzberg and The Barn in Mitte.",
    },
    {
        "key": "green_tea",
        "title": "Tea",
        "category": "food",
        "tags": ["tea"],
        "content": "Prefers green tea in the afternoon, never after six.",
    },
    {
        "key": "black_tea",
        "title": "Breakfast drink",
        "category": "food",
        "tags": ["tea"],
        "content": "Black tea with milk at breakfast on weekends.",
    },
    {
        "key": "atlas_deadline",
        "title": "Project Atlas deadline",
        "category": "work",
        "tags": ["atlas", "deadline"],
        "content": "The Atlas launch is due on March 3; the demo is on February 20.",
    },
    {
        "key": "atlas_team",
        "title": "Team",
        "category": "work",
        "tags": ["atlas", "people"],
        "content": "Maria leads design for Atlas, Jonas owns the backend.",
    },
    {
        "key": "allergy",
        "title": "Allergy",
        "category": "health",
        "tags": ["medical"],
        "content": "Allergic to peanuts; carries an epinephrine pen.",
    },
    {
        "key": "running",
        "title": "Running",
        "category": "health",
        "tags": ["sport", "routine"],
        "content": "Runs five kilometres on Tuesdays and Thursdays along the river.",
    },
    {
        "key": "birthday",
        "title": "Birthday",
        "category": "personal",
        "tags": ["dates"],
        "content": "Birthday is on July 14; likes chocolate cake.",
    },
    {
        "key": "languages",
        "title": "Programming languages",
        "category": "work",
        "tags": ["python", "rust"],
        "content": "Writes Python at work and is learning Rust on weekends.",
    },
    {
        "key": "vacation",
        "title": "Vacation plans",
        "category": "personal",
        "tags": ["travel", "japan"],
        "content": "Planning a trip to Kyoto and Osaka in spring to see the cherry blossoms.",
    },
    {
        "key": "expired_espresso",
        "title": "Old espresso note",
        "category": "food",
        "tags": ["coffee"],
        "content": "Temporary espresso machine at the office.",
        "expired": True,
    },
    {
        "key": "roasting",
        "title": "Hobby",
        "category": "hobbies",
        "tags": ["roasting", "coffee"],
        "content": "Roasts green coffee beans at home on Sundays.",
    },
    {
        "key": "cup_of_coffee",
        "title": "Quote",
        "category": "personal",
        "tags": ["quotes"],
        "content": "A cup of coffee shared with a friend is happiness tasted.",
    },
    {
        "key": "meetings",
        "title": "Standing meetings",
        "category": "work",
        "tags": ["meetings"],
        "content": "Prefers meetings before noon and no meetings on Fridays.",
    },
    {
        "key": "staging_db",
        "title": "Environments",
        "category": "infrastructure",
        "tags": ["infra"],
        "content": "The staging database runs PostgreSQL 15 on port 5433.",
    },
    {
        "key": "dog",
        "title": "Pets",
        "category": "personal",
        "tags": ["family"],
        "content": "The user's dog is called Biscuit and loves the beach.",
    },
]


def load_items(scope: MemoryScope) -> dict[str, str]:
    """Remember every fixture item; returns {key: memory_id}. The expired one expires a minute ago."""
    ids: dict[str, str] = {}
    past = timezone.now() - timedelta(minutes=1)
    for spec in ITEMS:
        result = services.memory_remember(
            scope=scope,
            content=spec["content"],
            title=spec["title"],
            category=spec["category"],
            tags=spec["tags"],
            expires_at=past if spec.get("expired") else None,
            actor="owner:fixture",
        )
        ids[spec["key"]] = result.memory["id"]
    return ids
