"""What a user owns in the record beside runs: uploaded source trees and the Unix login
their cluster jobs run as. Part of the record (``runs.models`` names them)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class Snapshot(models.Model):
    """An uploaded source tree; its files live once per content hash in ``<store>/snapshots/``."""

    digest = models.CharField(max_length=64, help_text="sha256 of the archive, its id in specs.")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="snapshots"
    )
    name = models.CharField(max_length=200, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    tree_bytes = models.BigIntegerField(
        default=0, help_text="The bytes of its extracted files (its owner's budget counts them)."
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "digest"], name="snapshot_once_per_owner"),
            models.CheckConstraint(
                condition=Q(digest__regex=r"^[0-9a-f]{64}$"), name="snapshot_digest_is_sha256"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.digest[:12]} {self.name}".strip()


class Profile(models.Model):
    """What simrun keeps of a user beyond Django's: the Unix login its cluster jobs run as.

    A service run as root for a team submits each user's Slurm jobs as the login mapped here
    (``simrun user NAME --login LOGIN``), never as root; a user without one cannot submit
    there (docs/slurm.md)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="simrun_profile"
    )
    login = models.CharField(
        max_length=32,
        blank=True,
        help_text="The Unix login the user's jobs are submitted as in team mode; empty: none.",
    )

    def __str__(self) -> str:
        return f"{self.user_id}: {self.login or '(no login)'}"
