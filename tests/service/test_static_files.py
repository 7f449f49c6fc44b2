"""The apps' static files are listed once a process (simrun_site/static_files.py) and served to
every client made after, as WhiteNoise serves them: the tests' clients, each with a middleware
chain of its own, no longer list them again each."""

from __future__ import annotations

from django.contrib.staticfiles import finders
from django.test import Client

from simrun_site.static_files import StaticFilesMiddleware

SHIPPED = "runs/favicon.ico"


def test_the_apps_static_files_are_listed_once_and_every_client_is_served_them(monkeypatch):
    with open(finders.find(SHIPPED), "rb") as file:
        expected = file.read()
    listings = []
    get_finders = finders.get_finders

    def counted():
        listings.append(1)
        return get_finders()

    monkeypatch.setattr(finders, "get_finders", counted)
    monkeypatch.setattr(StaticFilesMiddleware, "found", None)
    for _ in range(3):
        response = Client().get(f"/static/{SHIPPED}")
        assert response.status_code == 200
        assert b"".join(response.streaming_content) == expected
        assert response["Cache-Control"] and response["Last-Modified"]
    assert len(listings) == 1
