"""The API's content negotiation answers as DRF's does, and the common requests without
parsing their Accept header (``runs.api.negotiation``)."""

from __future__ import annotations

import pytest
from rest_framework import renderers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from runs.api.negotiation import ContentNegotiation

ACCEPTS = [
    None,
    "*/*",
    "application/json",
    "application/json; indent=4",
    "text/html",
    "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "application/*",
    "text/plain",
    "image/png",
    "",
]


class AnyRenderer(renderers.BaseRenderer):
    media_type = "*/*"
    format = "any"


RENDERER_LISTS = {
    "the API's": [renderers.JSONRenderer(), renderers.BrowsableAPIRenderer()],
    "HTML first": [renderers.StaticHTMLRenderer(), renderers.JSONRenderer()],
    "a catch-all first": [AnyRenderer(), renderers.JSONRenderer()],
}


def request(accept: str | None, query: str = "") -> Request:
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    return Request(APIRequestFactory().get(f"/api/runs/{query}", **headers))


def answer(negotiation, *args) -> tuple[str, str] | str:
    """The renderer's class and the media type chosen, or the error raised."""
    try:
        renderer, media_type = negotiation.select_renderer(*args)
    except Exception as error:  # noqa: BLE001 - the error is compared, not hidden
        return type(error).__name__
    return type(renderer).__name__, media_type


@pytest.mark.parametrize("listed", RENDERER_LISTS)
@pytest.mark.parametrize("accept", ACCEPTS)
@pytest.mark.parametrize("query", ["", "?format=json", "?format=api", "?format=xml"])
@pytest.mark.parametrize("suffix", [None, "json"])
def test_every_answer_is_drfs_own(listed, accept, query, suffix):
    chosen = RENDERER_LISTS[listed]
    ours = answer(ContentNegotiation(), request(accept, query), chosen, suffix)
    drfs = answer(DefaultContentNegotiation(), request(accept, query), chosen, suffix)
    assert ours == drfs


@pytest.mark.parametrize("accept", [None, "*/*", "application/json"])
def test_a_scripts_accept_is_answered_without_parsing_it(monkeypatch, accept):
    def parsed(*args):
        raise AssertionError("the Accept header was parsed")

    monkeypatch.setattr(DefaultContentNegotiation, "_get_parsed_accept_list", parsed)
    chosen = RENDERER_LISTS["the API's"]
    assert answer(ContentNegotiation(), request(accept), chosen) == (
        "JSONRenderer",
        "application/json",
    )


@pytest.mark.django_db
def test_the_api_answers_through_it(owner_client, monkeypatch):
    asked: list[str | None] = []
    select = ContentNegotiation.select_renderer

    def spied(self, request, *args):
        asked.append(request.META.get("HTTP_ACCEPT"))
        return select(self, request, *args)

    monkeypatch.setattr(ContentNegotiation, "select_renderer", spied)
    response = owner_client.get("/api/runs/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert asked == ["application/json"]
