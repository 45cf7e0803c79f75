"""HTTP errors of the service as JSON ``{error, detail}``, for every route and status."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

#: short machine-readable codes by HTTP status, for errors raised by Starlette itself
_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
    421: "misdirected_request",
    422: "invalid_body",
    500: "internal_error",
    503: "unavailable",
}


#: on every answer: a browser must not read a JSON or a text answer as a page or a script
NOSNIFF = ("X-Content-Type-Options", "nosniff")


def error_response(
    status: int, error: str, detail: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """``{"error": error, "detail": detail}`` with `status` (and ``nosniff``: an error may be
    answered outside the middleware that adds it, e.g. a 500)."""
    return JSONResponse(
        {"error": error, "detail": detail},
        status_code=status,
        headers={NOSNIFF[0]: NOSNIFF[1], **(headers or {})},
    )


class ApiError(Exception):
    """The one error type of the service's routes: HTTP status, a short code and a sentence
    for a person; raised anywhere in a route, answered as ``{"error", "detail"}``."""

    def __init__(
        self, status: int, error: str, detail: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        return error_response(self.status, self.error, self.detail, self.headers)


def bad_param(name: str, detail: str) -> ApiError:
    """A 400 naming the query parameter."""
    return ApiError(400, "bad_request", f"query parameter {name!r}: {detail}")


async def api_error(request: Request, exc: Exception) -> Response:
    """The app's handler of `ApiError`."""
    assert isinstance(exc, ApiError)
    return exc.response()


async def http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own HTTP errors (unknown route, wrong method...) in the JSON shape."""
    assert isinstance(exc, HTTPException)
    code = _CODES.get(exc.status_code, "http_error")
    detail = exc.detail
    if exc.status_code == 404:
        detail = f"No route {request.method} {request.url.path}."
    elif exc.status_code == 405:
        detail = f"{request.url.path} does not take {request.method}."
    headers = dict(exc.headers) if exc.headers else None
    return error_response(exc.status_code, code, str(detail), headers)


async def internal_error(request: Request, exc: Exception) -> Response:
    """An unexpected failure of a route: a JSON 500 naming the exception type."""
    return error_response(
        500, "internal_error", f"{type(exc).__name__} while serving {request.url.path}."
    )
