"""What the API server said no with, as one exception type per answer a caller tells apart.

Every refusal becomes an `ApiError` here, once (`error_from`): the HTTP status picks the
class, and the API server's `Status` object (its reason, message and details, with the
causes naming each field at fault) rides along. Callers catch the class they handle,
never compare a status number:

    ApiError                  any refusal (`status`, `reason`, `message`, `details`, `causes`)
      Unreachable             no answer at all: refused, reset, timed out (status 0)
      BadRequest              400
      Unauthorized            401: the credentials are not (or no longer) valid
      Forbidden               403: RBAC, or an admission plugin's refusal
        QuotaRefused          403 from the ResourceQuota admission: full, or not yet computed
      NotFound                404
      Conflict                409: an update lost a race (stale resourceVersion)
        AlreadyExists         409 on a create: the name is taken
      Gone                    410: a list's continue token or a watch's version expired
      Invalid                 422: the object does not validate (`causes` name the fields)
      TooManyRequests         429: API priority and fairness turned it away for now
      ServerError             5xx: the API server (or etcd behind it) failed

The official `kubernetes` client raises its own `ApiException` (e.g. status 0 on a TLS
failure); `from_client_exception` maps it onto the same classes. Pure: no client, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

TEXT_CHARS = 500
"""A refusal that is not a `Status` object (a proxy's HTML page) keeps this much as its
message."""
QUOTA_REFUSALS = (
    "exceeded quota",
    "status unknown for quota",
    "failed quota",
    "insufficient quota",
)
"""How the ResourceQuota admission plugin begins its refusals (after `... is forbidden: `):
the quota is full, not computed yet for a new or changed quota, or asks for requests the
object does not set."""


class Cause(NamedTuple):
    """One entry of a `Status` object's `details.causes`: what is wrong with which field."""

    field: str
    """The field's path, e.g. `spec.replicas.worker.replicas` (may be empty)."""
    reason: str
    """Machine-readable, e.g. `FieldValueInvalid`, `FieldValueRequired`."""
    message: str


class ApiError(Exception):
    """The API server refused a request (or did not answer: `Unreachable`).

    `str(error)` is the API server's own message, which names the object or field at
    fault, with the HTTP status."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        details: Mapping[str, Any] | None = None,
        body: str = "",
    ) -> None:
        self.status = status
        """The HTTP status (0: no answer). For people and logs: callers test the class."""
        self.reason = reason
        """The `Status` object's reason (`AlreadyExists`, `Invalid`, `Expired`, ...), else
        the HTTP reason phrase."""
        self.message = message
        """The API server's explanation (the `Status` message), else the answer's text."""
        self.details = dict(details or {})
        """The `Status` object's details: `name`, `group`, `kind`, `causes`,
        `retryAfterSeconds`, as the API server sent them (empty when it sent none)."""
        self.body = body
        """The answer as text."""
        super().__init__(f"{message} (HTTP {status})")

    @property
    def causes(self) -> tuple[Cause, ...]:
        """Each field at fault, as the API server named it (an `Invalid` object's, mostly)."""
        return tuple(
            Cause(
                str(c.get("field") or ""), str(c.get("reason") or ""), str(c.get("message") or "")
            )
            for c in self.details.get("causes") or ()
            if isinstance(c, Mapping)
        )


class Unreachable(ApiError):
    """The API server did not answer at all (connection refused or reset, timed out, TLS
    failed): e.g. while it restarts. A state of the cluster like any refusal, hence an
    `ApiError`, so that callers retry it the same way."""

    def __init__(self, cause: str) -> None:
        super().__init__(0, "Unreachable", f"the API server did not answer ({cause})")
        self.args = (self.message,)


class BadRequest(ApiError):
    """400: the request itself is malformed (e.g. a patch the API server cannot decode)."""


class Unauthorized(ApiError):
    """401: the credentials are not valid (an expired token)."""


class Forbidden(ApiError):
    """403: RBAC does not allow it, or an admission plugin refused it."""


class QuotaRefused(Forbidden):
    """403 from the ResourceQuota admission: the namespace's quota is used up, or not yet
    computed (a new or changed quota). It may pass later, unlike an RBAC refusal."""


class NotFound(ApiError):
    """404: no such object (or namespace, or resource type)."""


class Conflict(ApiError):
    """409: the object changed since it was read (its resourceVersion is stale)."""


class AlreadyExists(Conflict):
    """409 on a create: an object of that name exists."""


class Gone(ApiError):
    """410: what the request continues from has expired (a paged list's continue token, a
    watch's resourceVersion): start again from a fresh read."""


class Invalid(ApiError):
    """422: the object does not validate; `causes` name each field and why."""


class TooManyRequests(ApiError):
    """429: the API server sheds load (priority and fairness); `details` may carry
    `retryAfterSeconds`."""


class ServerError(ApiError):
    """5xx: the API server or etcd failed (a timeout, not ready yet)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def _status_object(body: str) -> Mapping[str, Any]:
    """The answer's `Status` object, or {} when it is not one."""
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) and data.get("kind") == "Status" else {}


def _error_class(status: int, reason: str, message: str) -> type[ApiError]:
    if status >= 500:
        return ServerError
    cls = _BY_STATUS.get(status, ApiError)
    if cls is Conflict and reason == "AlreadyExists":
        return AlreadyExists
    if cls is Forbidden and message.split("forbidden: ", 1)[-1].startswith(QUOTA_REFUSALS):
        return QuotaRefused
    return cls


def error_from(status: int, reason: str, body: str | bytes) -> ApiError:
    """The one mapping of a non-2xx answer (its HTTP status, reason phrase and body) to
    the error that says what it means; status 0 (no answer) is `Unreachable`."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    if status == 0:
        return Unreachable(reason.strip().split("\n", 1)[0] or "no answer")
    answer = _status_object(text)
    reason = str(answer.get("reason") or reason or "")
    message = str(answer.get("message") or "") or text.strip()[:TEXT_CHARS]
    message = message or reason or f"HTTP {status}"
    details = answer.get("details")
    cls = _error_class(status, reason, message)
    return cls(status, reason, message, details if isinstance(details, Mapping) else None, text)


def from_client_exception(exc: Any) -> ApiError:
    """The official client's `ApiException` (its `status`, `reason`, `body`) as ours."""
    return error_from(
        int(getattr(exc, "status", 0) or 0),
        str(getattr(exc, "reason", "") or ""),
        getattr(exc, "body", None) or "",
    )
