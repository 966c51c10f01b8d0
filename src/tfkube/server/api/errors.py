"""The API's errors that name fields: rendered as {detail, errors: [{field, message}]}
(the exception handlers in `server.app`)."""

from __future__ import annotations

from fastapi import HTTPException


class FieldHTTPError(HTTPException):
    """A 422 naming fields: rendered as {detail, errors: [{field, message}]}."""

    def __init__(
        self, errors: list[tuple[str, str]], detail: str = "the request is not valid"
    ) -> None:
        super().__init__(422, detail)
        self.errors = errors


def field_error(field: str, message: str) -> FieldHTTPError:
    return FieldHTTPError([(field, message)], f"{field}: {message}")
