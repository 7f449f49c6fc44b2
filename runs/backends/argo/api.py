"""Calls of the Kubernetes API that neither hang nor give up at the first hiccup.

Every call has a connect and a read timeout; a transient failure (no connection, a timeout,
429, 5xx) is tried again with a capped exponential backoff; what fails for good is raised
with a one-sentence message instead of the client's HTTP dump. An object too large (413, or
etcd's "request is too large" as a 500) fails for good: the same body is refused each time.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from runs.backends.base import BackendUnavailable

log = logging.getLogger(__name__)

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
TOO_LARGE = "request is too large"
"""etcd's refusal of an object over its request limit, answered as a 500: final, as a 413."""


class ClusterError(RuntimeError):
    """The Kubernetes API could not be reached or kept failing; the message is one sentence."""


class ClusterUnavailable(ClusterError, BackendUnavailable):
    """No answer (no connection, a timeout) or a transient error (429, 5xx) after every try:
    the controller tries again soon."""


class ClusterApiError(ApiException):
    """An answer of the API server that is an error, told in one sentence (its status kept)."""

    def __init__(self, error: ApiException, what: str) -> None:
        super().__init__(status=error.status, reason=error.reason)
        self.body = error.body
        self.headers = error.headers
        self.what = what

    def __str__(self) -> str:
        detail = _server_message(self.body) or " ".join(str(self.reason or "").split())
        if not self.status:  # the client's own failure, e.g. TLS
            return f"the Kubernetes API could not be asked to {self.what}: {detail[:300]}"
        return f"the Kubernetes API answered {self.status} to {self.what}: {detail or 'no reason'}"


class TransientApiError(ClusterApiError, ClusterUnavailable):
    """A 429 or 5xx answer that lasted through every try."""


@dataclass(frozen=True)
class CallPolicy:
    """How long a call may take and how often a transient failure is tried again."""

    connect_timeout_s: float = 5.0
    read_timeout_s: float = 20.0
    tries: int = 5
    """Tries of a call the server answers with 429 or 5xx."""
    silent_tries: int = 2
    """Tries of a call that gets no answer (no connection, a timeout): each costs a timeout."""
    backoff_s: float = 0.5
    backoff_cap_s: float = 8.0
    quiet_s: float = 30.0
    """After a call got no answer, how long further calls fail at once instead of waiting."""
    retry_after_cap_s: float = 30.0
    """The longest a 429's ``Retry-After`` is waited before the next try."""
    rate_per_s: float = 50.0
    """Calls a second a backend makes at most (client-go's rate limit), beyond ``burst``."""
    burst: int = 100

    @property
    def timeout(self) -> tuple[float, float]:
        return (self.connect_timeout_s, self.read_timeout_s)

    def wait_s(self, attempt: int, error: ApiException | None = None) -> float:
        """The pause after failed try ``attempt`` (0, 1, …): doubling, capped; at least what a
        429's ``Retry-After`` asks (capped at ``retry_after_cap_s``)."""
        backoff = float(min(self.backoff_cap_s, self.backoff_s * 2**attempt))
        return max(backoff, min(self.retry_after_cap_s, _retry_after(error)))


class RateLimit:
    """A token bucket the calls of one backend share, as client-go's: ``burst`` calls at once,
    then ``rate_per_s`` a second, so a pass over many runs does not flood the API server."""

    def __init__(
        self,
        policy: CallPolicy,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._policy, self._clock, self._sleep = policy, clock, sleep
        self._tokens = float(policy.burst)
        self._at = clock()
        self._lock = threading.Lock()

    def take(self) -> None:
        """Wait for a token, then take it."""
        with self._lock:
            now = self._clock()
            rate = self._policy.rate_per_s
            self._tokens = min(float(self._policy.burst), self._tokens + (now - self._at) * rate)
            self._at = now
            self._tokens -= 1
            wait = -self._tokens / rate if self._tokens < 0 else 0.0
        if wait:
            self._sleep(wait)


@dataclass
class Silence:
    """Since when the API server has not answered, shared by a backend's API objects: while
    it lasts a call fails at once, so a reconcile over many runs does not wait out a timeout
    for each of them."""

    until: float = 0.0
    reason: str = ""

    def check(self) -> None:
        if time.monotonic() < self.until:
            raise ClusterUnavailable(self.reason)


class Resilient:
    """An API object of the client (``CoreV1Api``, ``CustomObjectsApi``) whose every method
    is called with the policy's timeout and tried again on transient failures."""

    def __init__(
        self,
        api: Any,
        policy: CallPolicy,
        silence: Silence | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rate: RateLimit | None = None,
    ) -> None:
        self._api = api
        self._policy = policy
        self._silence = silence or Silence()
        self._sleep = sleep
        self._rate = rate
        self.api_client: ApiClient = api.api_client

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._api, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._call(name, method, *args, **kwargs)

        return call

    def _call(self, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        policy = self._policy
        kwargs.setdefault("_request_timeout", policy.timeout)
        what = _describe(name, args)
        self._silence.check()
        silent = 0
        for attempt in range(policy.tries):
            last = attempt == policy.tries - 1
            failed: ApiException | None = None
            if self._rate is not None:
                self._rate.take()
            try:
                return method(*args, **kwargs)
            except ApiException as error:
                if error.status not in TRANSIENT_STATUSES or _too_large(error):
                    raise ClusterApiError(error, what) from None
                if last:
                    raise TransientApiError(error, what) from None
                log.info("the Kubernetes API answered %s to %s; trying again", error.status, what)
                failed = error
            except (urllib3.exceptions.HTTPError, OSError) as error:
                silent += 1
                if last or silent >= policy.silent_tries:
                    reason = f"the Kubernetes API did not answer {what} after {silent} tries: "
                    self._silence.reason = reason + _reason(error)
                    self._silence.until = time.monotonic() + policy.quiet_s
                    raise ClusterUnavailable(self._silence.reason) from None
                log.info("the Kubernetes API did not answer %s (%s); trying again", what, error)
            self._sleep(policy.wait_s(attempt, failed))
        raise AssertionError("unreachable: the last try returns or raises")


def _retry_after(error: ApiException | None) -> float:
    """The seconds a 429 (or 503) asks to wait (``Retry-After``), 0 without."""
    headers = (error.headers if error is not None else None) or {}
    try:
        return max(0.0, float(headers.get("Retry-After") or 0))
    except ValueError:
        return 0.0  # an HTTP date: the backoff decides


def _too_large(error: ApiException) -> bool:
    """Whether an answer is etcd's refusal of an object too large: the same each try."""
    return error.status == 500 and TOO_LARGE in _server_message(error.body)


def without_pool_retries(api: ApiClient) -> ApiClient:
    """Leave retrying to ``Resilient``: urllib3's own retries would multiply every timeout."""
    api.rest_client.pool_manager.connection_pool_kw["retries"] = False
    return api


def _describe(name: str, args: tuple[Any, ...]) -> str:
    """What a call does, in words: ``read_namespaced_pod_log("p-1", …)`` is "read pod log p-1",
    ``get_namespaced_custom_object(group, version, ns, "workflows", "wf")`` "get workflow wf"."""
    words = [w for w in name.split("_") if w != "namespaced"]
    target = args[0] if args and isinstance(args[0], str) else ""
    if words[-2:] == ["custom", "object"] and len(args) >= 4:
        words = [words[0], str(args[3]).removesuffix("s")]
        target = args[4] if len(args) > 4 and isinstance(args[4], str) else ""
    return " ".join([*words, target]).strip()


def _server_message(body: Any) -> str:
    """The ``message`` of the Status object the API server sends with an error, one line."""
    if not body:
        return ""
    try:
        found = json.loads(body).get("message", "")
    except (TypeError, ValueError, AttributeError):
        found = str(body)
    return " ".join(str(found).split())[:300]


def _reason(error: BaseException) -> str:
    """The innermost reason of a urllib3 error, one line (a timeout, a refused connection)."""
    reason = getattr(error, "reason", None) or error
    text = type(reason).__name__ if not str(reason) else str(reason)
    if "timed out" in text.lower() or "timeout" in type(reason).__name__.lower():
        return "timed out"
    return " ".join(text.split())[:200]
