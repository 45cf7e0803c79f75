"""When a turn that ended on a provider error is tried again, and on which model.

OpenCode retries a rate-limited request by itself (up to 5 times, honouring ``Retry-After``);
a turn it gives up on ends with an assistant ``error``. Retryable, for the task manager: an
``APIError`` that OpenCode marks ``isRetryable``, or whose HTTP status is 429 or 5xx, or whose
message says the provider is overloaded. Anything else (auth, a bad request, a context overflow,
an abort) ends the task at once. A turn with a retryable error is tried `attempts` times in all
on the task's model, then as often on each of `fallback_models` in turn, each try after a
backoff longer than OpenCode's own, or the error's ``Retry-After`` when that is longer.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

#: the name a task on the server's default model has in texts
DEFAULT_MODEL_NAME = "the server's default model"


class RetryPlan(BaseModel):
    """The next try of a turn: on which model, after how many seconds."""

    model_config = ConfigDict(frozen=True)

    model: str | None
    delay: float


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def is_retryable(error: Any) -> bool:
    """Whether an assistant message's ``error`` is a passing provider failure."""
    error = _dict(error)
    if error.get("name") != "APIError":
        return False
    data = _dict(error.get("data"))
    status = data.get("statusCode")
    if data.get("isRetryable") is True:
        return True
    if isinstance(status, int) and (status == 429 or 500 <= status <= 599):
        return True
    return "overloaded" in str(data.get("message") or "").lower()


def retry_after(error: Any, now: float | None = None) -> float | None:
    """The seconds the provider asked to wait (``Retry-After``: seconds or an HTTP date, or
    ``retry-after-ms``), when the error carries its response headers."""
    headers = {
        str(k).lower(): str(v)
        for k, v in _dict(_dict(_dict(error).get("data")).get("responseHeaders")).items()
    }
    if "retry-after-ms" in headers:
        try:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        stamp = float(email.utils.parsedate_to_datetime(value).timestamp())
    except (TypeError, ValueError):
        return None
    return max(0.0, stamp - (time.time() if now is None else now))


def backoff(tries_on_model: int, initial: float, longest: float, asked: float | None) -> float:
    """The wait before the next try: `initial` doubled per try already made on this model,
    at most `longest`, and never less than the provider asked (`asked`)."""
    delay = min(longest, initial * float(2 ** max(0, tries_on_model - 1)))
    return max(delay, asked or 0.0)


def plan_retry(
    error: Any,
    model: str | None,
    tries: Sequence[str | None],
    *,
    attempts: int,
    fallback_models: Sequence[str],
    initial: float,
    longest: float,
) -> RetryPlan | None:
    """The next try after a turn that ended on `error` on `model`, having been tried on
    `tries` (the model of each try of this turn, in order); None when it must end."""
    if not is_retryable(error):
        return None
    on_model = sum(1 for m in tries if m == model)
    if on_model < attempts:
        return RetryPlan(model=model, delay=backoff(on_model, initial, longest, retry_after(error)))
    used = set(tries)
    for fallback in fallback_models:
        if fallback not in used:
            return RetryPlan(model=fallback, delay=min(initial, longest))
    return None  # every model had its tries


def attempts_line(tries: Sequence[str | None], provider_retries: int = 0) -> str:
    """``Attempts: 4 (3 on a/b, 1 on c/d)``: every try of the turn, by model in order, and
    how often OpenCode retried the provider within the last one."""
    counts: dict[str | None, int] = {}
    for model in tries:
        counts[model] = counts.get(model, 0) + 1
    parts = [f"{n} on {m or DEFAULT_MODEL_NAME}" for m, n in counts.items()]
    line = f"Attempts: {len(tries)} ({', '.join(parts)})"
    if provider_retries:
        line += f"; OpenCode retried the provider {provider_retries} time(s) in the last one"
    return line


def task_attempts(task: Any) -> str | None:
    """A finished turn's `attempts_line`, when it took more than one request to the provider
    (our tries again, or OpenCode's own retries); None otherwise."""
    retries = task.progress.provider_retries
    if not task.tries and not retries:
        return None
    tries = task.tries or [task.model]
    if all(m is None for m in tries):
        # every try on the server's default: the model that answered names it
        tries = [task.progress.model] * len(tries)
    return attempts_line(tries, retries)


def retry_status(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """OpenCode's ``{type: "retry", attempt, message, next}`` session status, kept as is."""
    if status.get("type") != "retry":
        return None
    return {
        "attempt": status.get("attempt") if isinstance(status.get("attempt"), int) else None,
        "message": str(status.get("message") or "")[:500],
        "next": status.get("next") if isinstance(status.get("next"), int) else None,
    }
