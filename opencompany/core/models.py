"""The kernel's one table: failed sign-in counters behind the login throttle (`opencompany.core.logins`)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class LoginThrottle(models.Model):
    """Failed sign-ins of one client address or one username within the current window, and until when
    further attempts are refused. Usernames are kept as keyed digests, never as typed."""

    key = models.CharField(max_length=80, unique=True)
    failures = models.PositiveIntegerField(default=0)
    last_failed_at = models.DateTimeField()
    locked_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["key"]
        constraints = [
            models.CheckConstraint(condition=Q(failures__gte=0), name="login_throttle_failures_non_negative")
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.failures})"
