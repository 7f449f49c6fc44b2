"""A session with a simrun server: the one place requests are sent and answers turned into errors.

``Session.request`` turns every answer that is no success, and no answer at all, into one of the
exceptions of ``runs.client.errors``; ``runs.client.api.Client`` makes its calls through it.
Never imports Django.
"""

from __future__ import annotations

from typing import Any, Self

import httpx
from rich.console import Console

from runs.client.config import TIMEOUT_S, settings
from runs.client.errors import (
    AuthError,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServerError,
    Unavailable,
    answer_body,
    answer_detail,
    field_problems,
)


class Session:
    """A server, a token and the console a user's calls report to, over one HTTP client."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = TIMEOUT_S,
        console: Console | None = None,
    ) -> None:
        self.config = settings(url, token)
        self.console = console or Console(highlight=False, soft_wrap=True)
        self.http = httpx.Client(
            base_url=self.config.url,
            headers={
                "Authorization": f"Token {self.config.token}",
                "Accept": "application/json",
            },
            timeout=timeout,
        )

    @property
    def url(self) -> str:
        return self.config.url

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, path: str, *, missing: str = "", **kwargs: Any
    ) -> httpx.Response:
        """Send a request; raise a ``SimrunError`` for no answer or one that is no success.

        ``missing`` is the message of a 404: what was not found, by its id.
        """
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TimeoutException:
            raise Unavailable(
                f"the simrun server at {self.config.url} did not answer in time"
            ) from None
        except httpx.HTTPError as error:
            raise Unavailable(
                f"cannot reach the simrun server at {self.config.url}: {error}. "
                "Is it running (`simrun serve`)? Check SIMRUN_URL or `simrun login`."
            ) from None
        status = response.status_code
        if status == 401:
            raise AuthError(
                f"the server at {self.config.url} refused the token ({answer_detail(response)}): "
                "run `simrun login` or set SIMRUN_TOKEN"
            )
        if status == 403:
            raise Forbidden(f"not allowed: {answer_detail(response)}")
        if status == 404:
            raise NotFound(missing or f"not found: {answer_detail(response)}")
        if status == 400:
            problems = answer_detail(response)
            fields = field_problems(answer_body(response))
            raise InvalidRequest(f"refused:\n{problems}", fields, problems)
        if status == 409:
            raise Conflict(answer_detail(response))
        if status >= 400:
            raise ServerError(f"the server failed ({status}): {answer_detail(response)}"[:500])
        return response

    def get(self, path: str, *, missing: str = "", **params: Any) -> Any:
        return self.request("GET", path, missing=missing, params=params).json()

    def post(self, path: str, *, missing: str = "", **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, missing=missing, **kwargs)

    def _status(self, method: str, path: str, params: dict[str, Any] | None = None) -> int:
        """The status of an answer, 0 for none."""
        try:
            return self.http.request(method, path, params=params).status_code
        except httpx.HTTPError:
            return 0
