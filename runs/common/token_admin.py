"""The admin of API tokens: made (shown once), given an expiry and revoked; never shown after.

Replaces knox's own admin, whose list shows each token's digest and searches by the token's
first characters: here a token is a user, a creation time, an expiry and a short fingerprint
of its digest, and revoking is deleting it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from knox.admin import AuthTokenCreateForm
from knox.models import AuthToken

if TYPE_CHECKING:
    _TokenModelAdmin = admin.ModelAdmin[AuthToken]
else:
    _TokenModelAdmin = admin.ModelAdmin

admin.site.unregister(AuthToken)


@admin.register(AuthToken)
class TokenAdmin(_TokenModelAdmin):
    """A token is shown once, in the message after it is made; revoke it by deleting it."""

    list_display = ["fingerprint", "user", "created", "expiry"]
    list_filter = ["expiry"]
    search_fields = ["user__username"]
    raw_id_fields = ["user"]
    actions = ["revoke"]

    @admin.display(description="fingerprint")
    def fingerprint(self, token: AuthToken) -> str:
        """The first characters of the digest: tells tokens apart, gives none away."""
        return str(token.digest)[:12]

    def get_fields(self, request: HttpRequest, obj: AuthToken | None = None) -> Any:
        return ["user", "expiry"] if obj is None else ["fingerprint", "user", "created", "expiry"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [] if obj is None else ["fingerprint", "user", "created"]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = AuthTokenCreateForm
        return super().get_form(request, obj, change=change, **kwargs)

    def save_model(self, request: HttpRequest, obj: AuthToken, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            self.message_user(
                request,
                f"The new token of {obj.user}, shown only now: {form.token}",
                messages.WARNING,
            )

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[AuthToken]) -> None:
        revoked, _ = queryset.delete()
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)
