"""`ModelCatalog`: the models the session server offers, their context windows, and which of
them a task may ask for.

OpenCode lists its configured providers and their models at ``GET /config/providers``
(``{"providers": [{"id", "models": {id: {"limit": {"context", "output"}}}}], "default": ...}``)
and its default model at ``GET /config`` (``"model": "provider/model"``). The catalog reads
both, keeps them `ttl` seconds (a task launch needs them; a burst of launches reads them once),
and answers: is this model allowed, what is the default, how big is a model's window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from .backend import JSON, SessionBackend
from .errors import TaskRequestError

#: how long one reading of the server's models is used
CATALOG_TTL_SECONDS = 30.0
#: how many allowed models a refusal names (the rest are counted)
NAMED_MODELS = 30


class ModelInfo(BaseModel):
    """One model of the server: ``provider/model`` and its limits in tokens (None: unknown)."""

    model_config = ConfigDict(frozen=True)

    name: str
    context: int | None = None
    output: int | None = None


def _limit(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def parse_providers(body: Any) -> dict[str, ModelInfo]:
    """The models of a ``GET /config/providers`` answer, by ``provider/model``; anything
    malformed is skipped (a provider the server lists badly is not one a task can use)."""
    out: dict[str, ModelInfo] = {}
    providers = body.get("providers") if isinstance(body, dict) else None
    for provider in providers if isinstance(providers, list) else ():
        if not isinstance(provider, dict) or not isinstance(provider.get("id"), str):
            continue
        models = provider.get("models")
        for key, model in models.items() if isinstance(models, dict) else ():
            if not isinstance(key, str) or not isinstance(model, dict):
                continue
            model_id = model.get("id") if isinstance(model.get("id"), str) else key
            limit = model.get("limit")
            if not isinstance(limit, dict):
                limit = {}
            name = f"{provider['id']}/{model_id}"
            out[name] = ModelInfo(
                name=name, context=_limit(limit.get("context")), output=_limit(limit.get("output"))
            )
    return out


def split_model(name: str) -> dict[str, str]:
    """``provider/model`` as OpenCode's prompt body wants it (the model id may hold ``/``)."""
    provider, _, model_id = name.partition("/")
    return {"providerID": provider, "modelID": model_id}


def model_name(model: dict[str, str] | None) -> str | None:
    """``{"providerID", "modelID"}`` as ``provider/model`` (None for None)."""
    if not model:
        return None
    return f"{model.get('providerID', '')}/{model.get('modelID', '')}"


def _named(models: Iterable[str]) -> str:
    names = sorted(models)
    if not names:
        return "none"
    shown = ", ".join(names[:NAMED_MODELS])
    more = len(names) - NAMED_MODELS
    return shown + (f" (and {more} more)" if more > 0 else "")


class ModelRefusedError(TaskRequestError):
    """A task asked for a model the server does not offer, or the config does not allow."""

    def __init__(self, model: str, reason: str, allowed: Iterable[str]) -> None:
        super().__init__(
            f'model "{model}" {reason}. The models allowed are: {_named(allowed)}. '
            "Call asyncagents_task again with one of them, or without model for the default."
        )
        self.model = model


class FallbackModelRefusedError(TaskRequestError):
    """The config's ``fallback_models`` names a model the server does not offer, or that
    ``allowed_models`` does not allow: no new task starts until the config is fixed (its
    tries would end on a model that cannot answer)."""

    def __init__(self, model: str, reason: str, allowed: Iterable[str]) -> None:
        super().__init__(
            f'The task manager\'s config is wrong: fallback_models has "{model}", which {reason}. '
            f"The models allowed are: {_named(allowed)}. No new task starts until fallback_models "
            "is fixed in the asyncagents config: tell the user."
        )
        self.model = model


class ModelCatalog:
    """The server's models, read at most every `ttl` seconds, filtered by `allowed`."""

    def __init__(
        self,
        backend: SessionBackend,
        allowed: Iterable[str] | None = None,
        ttl: float = CATALOG_TTL_SECONDS,
    ) -> None:
        self._backend = backend
        self._allowed = None if allowed is None else frozenset(allowed)
        self._ttl = ttl
        self._models: dict[str, ModelInfo] | None = None
        self._default: str | None = None
        self._read_at = 0.0
        self._lock = asyncio.Lock()

    async def _refresh(self) -> dict[str, ModelInfo]:
        async with self._lock:
            if self._models is not None and time.monotonic() - self._read_at < self._ttl:
                return self._models
            models = parse_providers(await self._backend.providers())
            config: JSON = await self._backend.server_config()
            default = config.get("model") if isinstance(config, dict) else None
            self._models = models
            self._default = default if isinstance(default, str) and default else None
            self._read_at = time.monotonic()
            return models

    async def models(self) -> dict[str, ModelInfo]:
        """Every model the server offers, by ``provider/model``."""
        return await self._refresh()

    async def allowed(self) -> list[str]:
        """The models a task may ask for: those the server offers, within `allowed_models`."""
        models = await self._refresh()
        return sorted(m for m in models if self._allowed is None or m in self._allowed)

    async def default(self) -> str | None:
        """The server's default model (its config's ``model``), None when it has none."""
        await self._refresh()
        return self._default

    async def check(self, model: str) -> ModelInfo:
        """The model, if a task may use it; else `ModelRefusedError` naming the allowed ones."""
        return await self._checked(model, ModelRefusedError)

    async def check_fallbacks(self, models: Iterable[str]) -> None:
        """`FallbackModelRefusedError` for the first of `models` (the config's
        ``fallback_models``) a task may not use, checked as a task's `model` is."""
        for model in models:
            await self._checked(model, FallbackModelRefusedError)

    async def _checked(
        self, model: str, error: type[ModelRefusedError] | type[FallbackModelRefusedError]
    ) -> ModelInfo:
        models = await self._refresh()
        allowed = await self.allowed()
        provider, _, model_id = model.partition("/")
        if not provider or not model_id:
            raise error(model, "is not written as provider/model", allowed)
        info = models.get(model)
        if info is None:
            raise error(model, "is not offered by the OpenCode server", allowed)
        if model not in allowed:
            raise error(model, "is not in this task manager's allowed_models", allowed)
        return info

    async def info(self, model: str | None) -> ModelInfo | None:
        """The limits of `model` (None: the server's default), when the server names them."""
        models = await self._refresh()
        name = model or self._default
        return models.get(name) if name else None
