"""The dashboard's sessions: read as Django's own database store reads them, in one query."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore as DjangoSessionStore
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.sessions import SessionStore

pytestmark = pytest.mark.django_db


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_service_reads_its_sessions_with_this_store():
    assert settings.SESSION_ENGINE == "runs.sessions"


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
