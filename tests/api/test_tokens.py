"""API tokens: hashed at rest, shown once, expiring, revocable from the CLI and the admin."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from knox.models import AuthToken
from rest_framework.test import APIClient, APIRequestFactory

from runs.api.authentication import TokenAuthentication
from runs.cli.user import ensure_user, printed
from runs.common.tokens import create_token, revoke_access, revoke_tokens

pytestmark = pytest.mark.django_db


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_the_database_keeps_no_token_only_its_digest(owner):
    _, token = create_token(owner)

    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM knox_authtoken")
        rows = [" ".join(map(str, row)) for row in cursor.fetchall()]
    assert rows
    assert not any(token in row for row in rows)
    assert bearer(token).get("/api/me/").status_code == 200


def test_a_token_expires_after_its_days(owner, settings):
    settings.SIMRUN_TOKEN_DAYS = 30
    _, token = create_token(owner)
    assert bearer(token).get("/api/me/").status_code == 200

    with time_machine.travel(dt.datetime.now(tz=dt.UTC) + dt.timedelta(days=31)):
        assert bearer(token).get("/api/me/").status_code == 401


def test_a_token_is_checked_in_one_query_however_many_tokens_its_user_made(
    owner, django_assert_num_queries
):
    for _ in range(5):
        create_token(owner, days=1)
    _, token = create_token(owner)
    request = APIRequestFactory().get("/api/me/", HTTP_AUTHORIZATION=f"Token {token}")

    with django_assert_num_queries(1):
        user, _record = TokenAuthentication().authenticate(request)
    assert user == owner


def test_an_expired_token_is_refused_and_deleted_when_used_a_live_one_of_its_user_kept(
    owner, settings
):
    _, old = create_token(owner, days=1)
    _, live = create_token(owner, days=30)

    with time_machine.travel(dt.datetime.now(tz=dt.UTC) + dt.timedelta(days=2)):
        assert bearer(old).get("/api/me/").status_code == 401
        assert bearer(live).get("/api/me/").status_code == 200
    assert AuthToken.objects.filter(user=owner).count() == 1


def test_the_token_of_a_user_made_inactive_is_refused(owner):
    _, token = create_token(owner)
    assert bearer(token).get("/api/me/").json()["username"] == owner.username
    owner.is_active = False
    owner.save()
    assert bearer(token).get("/api/me/").status_code == 401


def test_two_tokens_that_share_a_key_each_find_their_own_record(owner, stranger):
    """The key is the token's first characters: the digest tells two of a key apart."""
    _, mine = create_token(owner)
    record, theirs = create_token(stranger)
    AuthToken.objects.filter(digest=record.digest).update(token_key=mine[:15])
    assert bearer(mine).get("/api/me/").json()["username"] == owner.username
    assert bearer(theirs).get("/api/me/").status_code == 401  # its key is not its own now


@pytest.mark.parametrize("token", ["\u00e9t\u00e9", "x" * 300, "abc"])
def test_a_malformed_token_is_a_401_not_a_500(db, token):
    assert bearer(token).get("/api/me/").status_code == 401


def test_a_revoked_token_is_refused(owner):
    _, token = create_token(owner)

    assert revoke_tokens(owner) == 1
    assert bearer(token).get("/api/me/").status_code == 401


def test_a_revoked_user_has_no_way_in_left_until_simrun_user_gives_a_new_one(owner):
    _, token = create_token(owner)
    browser = Client()
    assert browser.login(username=owner.username, password="alice-password")
    assert browser.get("/api/me/").status_code == 200

    revoke_access(owner)

    assert bearer(token).get("/api/me/").status_code == 401
    assert browser.get("/api/me/").status_code in {401, 403}, "the session ended"
    assert browser.get("/").status_code == 302, "the dashboard asks for a login again"
    assert not Client().login(username=owner.username, password="alice-password")
    fresh = APIClient().post(
        "/api/token/", {"username": owner.username, "password": "alice-password"}, format="json"
    )
    assert fresh.status_code in {400, 401, 403}
    restored = ensure_user(name=owner.username)
    assert restored.password and restored.token
    assert bearer(restored.token).get("/api/me/").status_code == 200
    assert Client().login(username=owner.username, password=restored.password)


def test_simrun_user_prints_a_new_token_each_time_once(db):
    first = ensure_user(name="bob", days=7)
    second = ensure_user(name="bob")

    assert first.token and second.token and first.token != second.token
    assert f"token: {first.token}  (expires " in printed(first)
    assert AuthToken.objects.filter(user__username="bob").count() == 2
    never = ensure_user(name="bob", days=0)
    assert AuthToken.objects.get(digest__startswith="", user__username="bob", expiry=None)
    assert "never expires" in printed(never)


def test_the_admin_never_shows_a_token_but_the_one_it_just_made(db):
    operator = User.objects.create_superuser("root", password="root-password")
    _, token = create_token(operator)
    client = Client()
    client.force_login(operator)
    record = AuthToken.objects.get()

    pages = [
        client.get("/admin/knox/authtoken/").content.decode(),
        client.get(f"/admin/knox/authtoken/{record.pk}/change/").content.decode(),
    ]
    assert record.digest[:12] in pages[0]
    assert not any(token[:8] in page for page in pages)  # nor the token_key knox keeps

    made = client.post(
        "/admin/knox/authtoken/add/",
        {"user": operator.pk, "expiry_0": "2099-01-01", "expiry_1": "00:00:00"},
        follow=True,
    )
    new = next(t for t in AuthToken.objects.filter(user=operator) if t.digest != record.digest)
    shown = made.content.decode().split("shown only now: ")[1].split("<")[0].strip()
    assert bearer(shown).get("/api/me/").status_code == 200
    assert new.expiry is not None and new.expiry.year == 2099

    client.post(
        "/admin/knox/authtoken/",
        {"action": "revoke", "_selected_action": [new.pk]},
    )
    assert bearer(shown).get("/api/me/").status_code == 401


def test_the_user_of_a_token_is_read_with_every_field_the_orm_reads(owner):
    owner.first_name, owner.email = "Ada", "ada@example.org"
    owner.save()
    _, token = create_token(owner)
    request = APIRequestFactory().get("/api/me/", HTTP_AUTHORIZATION=f"Token {token}")

    user, record = TokenAuthentication().authenticate(request)

    expected = User.objects.get(pk=owner.pk)
    assert user.get_deferred_fields() == set()
    assert {f.attname: getattr(user, f.attname) for f in User._meta.concrete_fields} == {
        f.attname: getattr(expected, f.attname) for f in User._meta.concrete_fields
    }
    assert user._state.db == "default" and not user._state.adding
    assert record.created is not None and record.user_id == owner.pk
