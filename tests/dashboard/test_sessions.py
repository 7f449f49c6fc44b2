"""The dashboard's sessions and their users: read as Django's own store and backend read
them, each in one query; sessions signed in before the upgrade stay signed in."""

from __future__ import annotations

import datetime as dt
import importlib

import pytest
import time_machine
from django.apps import apps
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore as DjangoSessionStore
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.common.sessions import SessionStore
from runs.common.user_backend import UserBackend

UPGRADE = importlib.import_module("runs.migrations.0012_sessions_signed_in_by_the_user_backend")
MOVE = importlib.import_module("runs.migrations.0016_sessions_name_the_moved_user_backend")

pytestmark = pytest.mark.django_db


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_service_reads_its_sessions_and_their_users_with_these():
    assert settings.SESSION_ENGINE == "runs.common.sessions"
    # Login throttling checks a login first; the user of a session is read by UserBackend.
    assert settings.AUTHENTICATION_BACKENDS == [
        "runs.common.login_throttle.ThrottleBackend",
        "runs.common.user_backend.UserBackend",
    ]


def test_a_session_is_read_in_one_query_with_what_django_stored():
    saved = DjangoSessionStore()
    saved["plot"] = {"zoom": 2, "task": "sweep"}
    saved.create()

    with CaptureQueriesContext(connection) as captured:
        loaded = SessionStore(saved.session_key).load()

    assert loaded == {"plot": {"zoom": 2, "task": "sweep"}}
    assert len(captured.captured_queries) == 1


def test_an_expired_session_reads_as_empty_and_loses_its_key_as_with_djangos_store():
    saved = SessionStore()
    saved["plot"] = 1
    saved.set_expiry(60)
    saved.create()
    key = saved.session_key

    with time_machine.travel(timezone.now() + dt.timedelta(seconds=61)):
        ours, django = SessionStore(key), DjangoSessionStore(key)
        assert ours.load() == django.load() == {}
    # A session saved after this gets a new key, not the one the browser brought.
    assert ours.session_key is None and django.session_key is None


def test_an_unknown_key_reads_as_empty_and_is_not_taken_on():
    store = SessionStore("k" * 32)
    assert store.load() == {}
    store["plot"] = 1
    store.save()
    assert store.session_key != "k" * 32
    assert Session.objects.filter(session_key=store.session_key).exists()


def test_a_session_whose_data_was_tampered_with_reads_as_empty():
    saved = SessionStore()
    saved["_auth_user_id"] = "1"
    saved.create()
    Session.objects.filter(session_key=saved.session_key).update(session_data="forged:data")
    assert SessionStore(saved.session_key).load() == {}


def test_a_signed_in_user_sees_the_runs_table_and_a_signed_out_one_is_sent_to_sign_in():
    user = User.objects.create_user("ada", password="a-long-password")
    client = signed_in(user)
    assert client.get("/runs/table/").status_code in (200, 286)

    client.post("/logout/")
    response = client.get("/runs/table/")
    assert response.status_code == 302 and "login" in response["Location"]


def test_a_session_past_its_expiry_signs_its_user_out():
    user = User.objects.create_user("ada", password="a-long-password")
    client = signed_in(user)

    later = timezone.now() + dt.timedelta(seconds=settings.SESSION_COOKIE_AGE + 1)
    with time_machine.travel(later):
        response = client.get("/runs/table/")
    assert response.status_code == 302 and "login" in response["Location"]


def test_the_user_of_a_session_is_read_with_every_field_the_orm_reads():
    ada = User.objects.create_user("ada", password="a-long-password", is_staff=True)
    User.objects.filter(pk=ada.pk).update(last_login=timezone.now())
    expected = User.objects.get(pk=ada.pk)

    with CaptureQueriesContext(connection) as captured:
        user = UserBackend().get_user(ada.pk)

    assert len(captured.captured_queries) == 1
    assert isinstance(user, User) and user.pk == ada.pk
    for field in User._meta.concrete_fields:
        assert getattr(user, field.attname) == getattr(expected, field.attname), field.name
    assert user.check_password("a-long-password")


def test_an_inactive_or_unknown_user_of_a_session_is_nobody():
    ada = User.objects.create_user("ada", is_active=False)
    assert UserBackend().get_user(ada.pk) is None
    assert UserBackend().get_user(ada.pk + 1000) is None


def django_signed_in_session(user: User) -> str:
    """A session as Django's own model backend signed it in, before this upgrade."""
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return session.session_key


def test_a_user_signed_in_before_the_upgrade_stays_signed_in_after_its_migration():
    ada = User.objects.create_user("ada", password="a-long-password")
    key = django_signed_in_session(ada)
    client = Client()
    client.cookies[settings.SESSION_COOKIE_NAME] = key

    UPGRADE.forwards(apps, None)
    MOVE.forwards(apps, None)

    assert client.get("/runs/table/").status_code in (200, 286)
    MOVE.backwards(apps, None)
    UPGRADE.backwards(apps, None)
    assert SessionStore(key).load()[BACKEND_SESSION_KEY] == (
        "django.contrib.auth.backends.ModelBackend"
    )


def test_a_user_signed_in_before_the_user_backend_moved_stays_signed_in():
    ada = User.objects.create_user("ada", password="a-long-password")
    key = django_signed_in_session(ada)
    session = SessionStore(key)
    session[BACKEND_SESSION_KEY] = MOVE.OLD_PATH
    session.save()
    client = Client()
    client.cookies[settings.SESSION_COOKIE_NAME] = key

    MOVE.forwards(apps, None)

    assert client.get("/runs/table/").status_code in (200, 286)
    assert SessionStore(key).load()[BACKEND_SESSION_KEY] == MOVE.PATH
