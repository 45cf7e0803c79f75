"""The OpenAPI 3.1 document of the task API, generated from its routes' declarations and their
pydantic models (query parameters from a `Query` model's fields, answers from their JSON schemas),
so it cannot drift from what the routes parse and answer."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from .models import Error, NoQuery, Query

_REF = "#/components/schemas/{model}"
_PATH_PARAM = re.compile(r"{(\w+)}")

#: what each error status means, when an operation does not say more
ERRORS = {
    400: "A bad query parameter (named in `detail`).",
    401: "Missing or wrong bearer token.",
    404: "No such task of this service.",
    409: "The task is not running.",
    502: "The session server failed.",
    503: "The task store failed, or the service is stopping.",
}


@dataclass(frozen=True)
class Operation:
    """One route as the document shows it."""

    method: str
    path: str
    summary: str
    query: type[Query] = NoQuery
    #: the 200 answer's model; None: `answer_schema` (with `media_type`)
    answer: type[BaseModel] | None = None
    answer_description: str = "OK"
    media_type: str = "application/json"
    answer_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    #: error statuses besides 401 (every operation has it), with their meaning if it differs
    errors: dict[int, str] = field(default_factory=dict)
    description: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


def _parameters(op: Operation, defs: dict[str, Any]) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PATH_PARAM.findall(op.path)
    ]
    schema = op.query.model_json_schema(ref_template=_REF)
    defs.update(schema.pop("$defs", {}))
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        description = prop.pop("description", None)
        prop.pop("title", None)
        if prop.get("default", 0) is None:
            del prop["default"]  # no value: nothing to say
        if "anyOf" in prop:  # `X | None`: the parameter is optional, its type is X
            kinds = [k for k in prop.pop("anyOf") if k.get("type") != "null"]
            prop.update(kinds[0] if len(kinds) == 1 else {"anyOf": kinds})
        param: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": prop,
        }
        if description:
            param["description"] = description
        params.append(param)
    for name, description in op.headers:
        params.append(
            {
                "name": name,
                "in": "header",
                "required": False,
                "description": description,
                "schema": {"type": "string"},
            }
        )
    return params


def _content(media_type: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {media_type: {"schema": schema}}


def openapi_document(
    operations: Sequence[Operation], *, title: str, version: str, description: str
) -> dict[str, Any]:
    """The document of `operations` (every one needs the bearer token)."""
    models: list[type[BaseModel]] = [Error, *(op.answer for op in operations if op.answer)]
    unique = list(dict.fromkeys(models))
    _, top = models_json_schema([(m, "serialization") for m in unique], ref_template=_REF)
    defs: dict[str, Any] = dict(top.get("$defs", {}))
    error_ref = {"$ref": _REF.format(model="Error")}
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        answer = {"$ref": _REF.format(model=op.answer.__name__)} if op.answer else op.answer_schema
        responses: dict[str, Any] = {
            "200": {
                "description": op.answer_description,
                "content": _content(op.media_type, answer),
            }
        }
        for status in sorted({401, *op.errors}):
            responses[str(status)] = {
                "description": op.errors.get(status) or ERRORS.get(status, "Error."),
                "content": _content("application/json", error_ref),
            }
        operation: dict[str, Any] = {
            "summary": op.summary,
            "operationId": _operation_id(op),
            "parameters": _parameters(op, defs),
            "responses": responses,
        }
        if op.description:
            operation["description"] = op.description
        paths.setdefault(op.path, {})[op.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version, "description": description},
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": dict(sorted(defs.items())),
        },
    }


def _operation_id(op: Operation) -> str:
    words = re.sub(r"[^a-z0-9]+", "_", op.path.lower()).strip("_")
    return f"{op.method.lower()}_{words}"
