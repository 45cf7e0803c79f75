"""The OpenAPI 3.1 document of the task API (kept by hand; a test checks it against the routes)."""

from __future__ import annotations

from typing import Any

from ..tasks.models import Task, TaskStatus

JSON = dict[str, Any]


def _query(name: str, description: str, schema: JSON | None = None) -> JSON:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema or {"type": "string"},
    }


_TASK_ID: JSON = {
    "name": "task_id",
    "in": "path",
    "required": True,
    "description": "The task's full id (a prefix is not accepted).",
    "schema": {"type": "string"},
}


def _error(description: str) -> JSON:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _ok(description: str, ref: str | None = None, schema: JSON | None = None) -> JSON:
    body = {"$ref": f"#/components/schemas/{ref}"} if ref else schema or {"type": "object"}
    return {"description": description, "content": {"application/json": {"schema": body}}}


_AUTH = {"401": _error("Missing or wrong bearer token.")}
_BAD = {"400": _error("A bad query parameter (named in `detail`).")}
_MISSING = {"404": _error("No such task (or, for messages, its child session is gone).")}
_STORE = {"503": _error("The task store failed.")}

_task_schema = Task.model_json_schema(ref_template="#/components/schemas/{model}")
_defs = _task_schema.pop("$defs", {})
_task_schema["properties"]["label"] = {
    "type": "string",
    "description": "The id with the marks (forked) and (resumed).",
}
_task_schema["properties"]["parent_title"] = {
    "anyOf": [{"type": "string"}, {"type": "null"}],
    "description": (
        "One task's answer only: the parent session's title as its server names it; null when "
        "it cannot be read now (show `parent_session_id`)."
    ),
}

OPENAPI: JSON = {
    "openapi": "3.1.0",
    "info": {
        "title": "asyncagents task API",
        "version": "1",
        "description": (
            "Background tasks of the asyncagents service, their live events and statistics. "
            "Every route needs `Authorization: Bearer <token>` (the service's token file)."
        ),
    },
    "security": [{"bearer": []}],
    "paths": {
        "/v1/tasks": {
            "get": {
                "summary": "List tasks (newest first by default), one page at a time.",
                "parameters": [
                    _query("parent", "Only tasks of this parent session id."),
                    _query(
                        "status",
                        "Only these statuses, comma-separated: "
                        + ", ".join(s.value for s in TaskStatus),
                    ),
                    _query("agent", "Only tasks of this agent."),
                    _query("q", "Case-insensitive text in the description or the prompt."),
                    _query(
                        "sort",
                        "Order (default -created_at: newest first).",
                        {
                            "type": "string",
                            "enum": ["-created_at", "created_at", "-updated_at", "updated_at"],
                        },
                    ),
                    _query(
                        "limit",
                        "Page size (default 100).",
                        {"type": "integer", "minimum": 1, "maximum": 500},
                    ),
                    _query("cursor", "`next_cursor` of the previous page (opaque)."),
                ],
                "responses": {
                    "200": _ok("A page of tasks.", "TaskPage"),
                    **_BAD,
                    **_AUTH,
                    **_STORE,
                },
            }
        },
        "/v1/tasks/{task_id}": {
            "get": {
                "summary": "One task with its progress and fork stats.",
                "parameters": [_TASK_ID],
                "responses": {"200": _ok("The task.", "Task"), **_AUTH, **_MISSING, **_STORE},
            }
        },
        "/v1/tasks/{task_id}/messages": {
            "get": {
                "summary": "The child's conversation (the current turn unless full_session).",
                "parameters": [
                    _TASK_ID,
                    _query(
                        "full_session",
                        "The whole conversation, not only the current turn.",
                        {"type": "boolean"},
                    ),
                    _query("since_message_id", "Only messages after this message id."),
                    _query(
                        "message_limit",
                        "Only the newest N messages.",
                        {"type": "integer", "minimum": 0, "maximum": 10000},
                    ),
                ],
                "responses": {
                    "200": _ok("The messages, oldest first.", "Conversation"),
                    **_BAD,
                    **_AUTH,
                    **_MISSING,
                    "502": _error("The session server failed."),
                    **_STORE,
                },
            }
        },
        "/v1/tasks/{task_id}/cancel": {
            "post": {
                "summary": "Cancel a running (or resumed) task.",
                "parameters": [_TASK_ID],
                "responses": {
                    "200": _ok("The cancelled task.", "Task"),
                    **_AUTH,
                    **_MISSING,
                    "409": _error("The task has already ended."),
                    **_STORE,
                },
            }
        },
        "/v1/stats": {
            "get": {
                "summary": "Counts by status and agent, tool calls by name, turn durations.",
                "parameters": [_query("parent", "Only tasks of this parent session id.")],
                "responses": {"200": _ok("The statistics.", "Stats"), **_BAD, **_AUTH, **_STORE},
            }
        },
        "/v1/events": {
            "get": {
                "summary": "Server-Sent Events: `snapshot`, then task.created, task.updated, "
                "task.completed, task.error, task.cancelled, task.resumed, task.cleared.",
                "description": (
                    "Each event has an increasing integer `id`; its `data` is the task's JSON, "
                    "at most 64 KiB per event, its texts cut as needed and the cut fields named "
                    "in `truncated` (the snapshot: `{tasks, heartbeat_ms, now_ms, omitted}`, the "
                    "newest tasks that fit in 4 MiB, each at most 16 KiB; `omitted` counts the "
                    "others). Send `Last-Event-ID` to resume after a reconnect; a fresh snapshot "
                    "comes when that id is too old or not an id. Comment lines are heartbeats. "
                    "A client too slow to read is disconnected."
                ),
                "parameters": [
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    }
                ],
                "responses": {
                    "200": {
                        "description": "The event stream.",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    **_AUTH,
                    "503": _error("Too many subscribers, or the service is stopping."),
                },
            }
        },
        "/v1/openapi.json": {
            "get": {
                "summary": "This document.",
                "responses": {"200": _ok("The OpenAPI document."), **_AUTH},
            }
        },
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            **_defs,
            "Task": _task_schema,
            "Error": {
                "type": "object",
                "required": ["error", "detail"],
                "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
            },
            "TaskPage": {
                "type": "object",
                "required": ["tasks", "total", "usage", "next_cursor"],
                "properties": {
                    "tasks": {"type": "array", "items": {"$ref": "#/components/schemas/Task"}},
                    "total": {"type": "integer"},
                    "usage": {
                        "$ref": "#/components/schemas/TaskUsage",
                        "description": "Tokens and cost of every task matching the filters.",
                    },
                    "next_cursor": {"type": ["string", "null"]},
                },
            },
            "Conversation": {
                "type": "object",
                "required": ["task_id", "session_id", "messages"],
                "properties": {
                    "task_id": {"type": "string"},
                    "session_id": {"type": ["string", "null"]},
                    "messages": {"type": "array", "items": {"type": "object"}},
                },
            },
            "Stats": {
                "type": "object",
                "required": ["tasks", "by_status", "by_agent", "tool_calls", "durations", "usage"],
                "properties": {
                    "tasks": {"type": "integer"},
                    "by_status": {"type": "object"},
                    "by_agent": {"type": "object"},
                    "tool_calls": {"type": "object"},
                    "durations": {"type": "object"},
                    "usage": {
                        "type": "object",
                        "description": "Tokens and cost: `total`, and `by_agent`, `by_model` "
                        "(provider/model), `by_parent` (parent session) and `by_tree` (top-level "
                        "session), each a map to a TaskUsage.",
                        "required": ["total", "by_agent", "by_model", "by_parent", "by_tree"],
                        "properties": {
                            "total": {"$ref": "#/components/schemas/TaskUsage"},
                            **{
                                name: {
                                    "type": "object",
                                    "additionalProperties": {
                                        "$ref": "#/components/schemas/TaskUsage"
                                    },
                                }
                                for name in ("by_agent", "by_model", "by_parent", "by_tree")
                            },
                        },
                    },
                },
            },
        },
    },
}
