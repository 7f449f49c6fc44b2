"""Password guessing is throttled at /api/token/ and /login/ (runs/common/login_throttle.py):
past the limit a username, or an address, is refused with 429 and Retry-After, even with the
right password, until the lockout has passed; other users and addresses log in as before."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

ATTACKER = "203.0.113.7"
ELSEWHERE = "198.51.100.20"


def api_login(username: str, password: str, address: str = ATTACKER):
    return APIClient().post(
        "/api/token/", {"username": username, "password": password}, REMOTE_ADDR=address
    )


def page_login(username: str, password: str, address: str = ATTACKER):
    return Client().post(
        "/login/", {"username": username, "password": password}, REMOTE_ADDR=address
    )


LOGINS = {"api": api_login, "page": page_login}


@pytest.fixture(params=sorted(LOGINS))
def login(request):
    return LOGINS[request.param]


def guessed(login, username: str, times: int = 30, address: str = ATTACKER) -> list[int]:
    return [login(username, f"guess-{i}", address).status_code for i in range(times)]


def test_the_right_password_logs_in_before_any_failure(login, owner):
    response = login("alice", "alice-password")
    assert response.status_code in {200, 302}
    assert response.status_code != 429


def test_30_wrong_passwords_then_the_right_one_is_refused_with_429_and_retry_after(
    login, owner, settings
):
    statuses = guessed(login, "alice")
    assert 429 in statuses and statuses.index(429) <= settings.AXES_FAILURE_LIMIT
    response = login("alice", "alice-password")
    assert response.status_code == 429
    assert int(response["Retry-After"]) == 15 * 60


def test_the_api_answers_a_lockout_in_json(owner):
    guessed(api_login, "alice")
    response = api_login("alice", "alice-password")
    assert response.status_code == 429
    assert "too many failed logins" in response.json()["detail"]


def test_the_login_page_answers_a_lockout_with_a_short_page(owner):
    guessed(page_login, "alice")
    response = page_login("alice", "alice-password")
    assert response.status_code == 429
    assert response["Content-Type"].startswith("text/html")
    assert b"too many failed logins" in response.content


def test_the_username_is_locked_from_every_address(login, owner):
    guessed(login, "alice")
    assert login("alice", "alice-password", ELSEWHERE).status_code == 429


def test_the_address_is_locked_for_every_username(login, owner, stranger):
    guessed(login, "alice")
    assert login("mallory", "mallory-password").status_code == 429


def test_another_user_from_another_address_logs_in(login, owner, stranger):
    guessed(login, "alice")
    response = login("mallory", "mallory-password", ELSEWHERE)
    assert response.status_code in {200, 302}


def test_the_right_password_works_again_once_the_lockout_has_passed(login, owner):
    guessed(login, "alice")
    with time_machine.travel(timezone.now() + dt.timedelta(minutes=16)):
        response = login("alice", "alice-password")
    assert response.status_code in {200, 302}


def test_a_few_failures_then_the_right_password_log_in(login, owner):
    guessed(login, "alice", times=5)
    assert login("alice", "alice-password").status_code in {200, 302}
