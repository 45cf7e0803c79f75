"""A plain, single-pass fork pipeline: the yardstick that `engine="python"` is held against.

What someone would write in an afternoon from docs/pipeline-contract.md: parse, slice at the
latest compaction, number the results from the newest, format every message, drop the oldest
until the context fits, write the preamble. Same text and stats as `build_fork_context` on
well-formed sessions; it checks nothing (malformed input gives a KeyError or a wrong answer).

    from plain_fork import plain_fork
    text, stats = plain_fork(data)    # data: JSON bytes/str or the parsed message list
"""

from __future__ import annotations

import json
from typing import Any

from asyncagents.config import DEFAULT_CONFIG, ForkConfig


def plain_fork(data: Any, config: ForkConfig = DEFAULT_CONFIG) -> tuple[str, dict[str, Any]]:
    """The injected text (preamble + context, or "") and the stats as `ForkStats.model_dump()`."""
    messages = json.loads(data) if isinstance(data, bytes | str) else data
    if isinstance(messages, dict):
        messages = messages["messages"]
    kept, slice_index, tail = compaction(messages)
    msgs = [messages[i] for i in kept]

    # Stage 2: every result of the kept messages, oldest first, then tiered from the newest.
    found = []  # (message, part, text, tool name, is an error)
    for m, msg in enumerate(msgs):
        last_tool = ""
        for p, part in enumerate(msg["parts"]):
            kind = part.get("type")
            if kind == "tool":
                last_tool = part.get("tool") or part.get("name") or "unknown"
                state = part.get("state") or {}
                status = state.get("status")
                if status == "completed":
                    cleared = (state.get("time") or {}).get("compacted") is not None
                    text = config.cleared_marker if cleared else state.get("output") or ""
                elif status == "error":
                    text = state.get("error") or ""
                else:
                    continue
                found.append((m, p, text, last_tool, status == "error"))
            elif kind == "tool_result" and part.get("text"):
                name = part.get("tool") or part.get("name") or last_tool
                found.append((m, p, part["text"], name, False))

    stats = {"truncated": 0, "head_tail": 0, "compacted": 0, 1: 0, 2: 0, 3: 0}
    rendered: dict[tuple[int, int], str] = {}
    tiers: dict[tuple[int, int], int] = {}
    for k, (m, p, text, name, is_error) in enumerate(found):
        index = len(found) - 1 - k
        tier = config.tier_of(index)
        tiers[m, p] = tier
        if config.cleared_marker in text:
            stats["compacted"] += 1
            rendered[m, p] = text
            continue
        stats[tier] += 1
        limit = config.result_limit(tier)
        if limit is not None and len(text) > limit:
            stats["truncated"] += 1
            if (
                is_error
                or any(word in name for word in config.head_tail_keywords)
                or any(pattern in text for pattern in config.error_patterns)
            ):
                stats["head_tail"] += 1
                text = head_tail(text, limit, config)
            else:
                text = text[:limit] + f"\n...[truncated {len(text) - limit} chars]..."
        rendered[m, p] = text

    # Stage 3: one block per message, then the newest that fit.
    blocks = []
    for m, msg in enumerate(msgs):
        info = msg["info"]
        lines = []
        parts = msg["parts"]
        for p, part in enumerate(parts):
            kind = part.get("type")
            if kind == "text":
                if part.get("text") and not part.get("ignored"):
                    lines.append(part["text"])
            elif kind == "tool":
                line = "[Tool: " + (part.get("tool") or part.get("name") or "unknown") + "]"
                state = part.get("state") or {}
                if "input" in state:
                    params = json.dumps(state["input"], ensure_ascii=False, separators=(",", ":"))
                    if state.get("status") is not None:
                        tier = tiers.get((m, p), 1)
                    else:  # legacy: the tier of the next tool_result in this message
                        nexts = (tiers[m, q] for q in range(p + 1, len(parts)) if (m, q) in tiers)
                        tier = next(nexts, 1)
                    limit = config.params_limit(tier)
                    if len(params) > limit:
                        params = params[:limit] + "..."
                    line += " " + params
                lines.append(line)
                if (m, p) in rendered:
                    lines.append("[Tool result]\n" + rendered[m, p])
            elif kind == "tool_result" and (m, p) in rendered:
                lines.append("[Tool result]\n" + rendered[m, p])
        error = info.get("error")
        if info.get("role") == "assistant" and error is not None:
            name = error.get("name") or "Error"
            message = (error.get("data") or {}).get("message")
            lines.append(f"[Error: {name}] {message}" if message else f"[Error: {name}]")
        body = "".join("\n" + line for line in lines)
        blocks.append(("\n" + label(info.get("role")) + ":", body))

    sizes = [len(head) + len(body) for head, body in blocks]
    frame = len("<inherited_context>") + len("\n</inherited_context>")
    total = frame + sum(sizes)
    first, hard_capped = 0, False
    if total > config.char_no_removal and total > config.char_budget:
        first, running = len(blocks), frame
        while first > 0 and running + sizes[first - 1] <= config.char_budget:
            first -= 1
            running += sizes[first]
        if first == len(blocks):  # the newest alone does not fit: cut its body
            first, hard_capped = len(blocks) - 1, True
            head, body = blocks[-1]
            limit = max(0, config.char_budget - frame - len(head) - 36)
            if len(body) > limit:
                blocks[-1] = (head, head_tail(body, limit, config))
    kept_blocks = blocks[first:]
    context = ""
    if kept_blocks:
        joined = "".join(head + body for head, body in kept_blocks)
        context = "<inherited_context>" + joined + "\n</inherited_context>"
    result = {
        "original_count": len(messages),
        "final_count": len(kept_blocks),
        "total_chars": len(context),
        "truncated_results": stats["truncated"],
        "removed_messages": first,
        "compaction_detected": slice_index >= 0,
        "compaction_slice_index": slice_index,
        "tier_distribution": {"tier1": stats[1], "tier2": stats[2], "tier3": stats[3]},
        "head_tail_applied": stats["head_tail"],
        "compacted_results": stats["compacted"],
        "compaction_tail_messages": tail,
        "hard_capped": hard_capped,
    }
    if not context:
        return "", result
    return preamble(result, config) + "\n\n" + context, result


def compaction(messages: list[Any]) -> tuple[list[int], int, int]:
    """Kept indexes, the summary's index (-1: none) and the tail length, latest marker first."""

    def is_summary(msg: Any) -> bool:
        return msg["info"].get("role") == "assistant" and msg["info"].get("summary") is True

    n = len(messages)
    for at in range(n - 1, -1, -1):
        info = messages[at]["info"]
        if info.get("role") != "user":
            continue
        markers = [p for p in messages[at]["parts"] if p.get("type") == "compaction"]
        if not markers:
            continue
        summary = None
        if info.get("id") is not None:
            by_parent = (
                i
                for i, msg in enumerate(messages)
                if is_summary(msg) and msg["info"].get("parentID") == info["id"]
            )
            summary = next(by_parent, None)
        if summary is None:
            summary = next((i for i in range(at + 1, n) if is_summary(messages[i])), None)
        if summary is None:
            continue
        tail = range(0)
        tail_start_id = markers[0].get("tail_start_id")
        if tail_start_id is not None:
            ids = (i for i, msg in enumerate(messages) if msg["info"].get("id") == tail_start_id)
            start = next(ids, None)
            if start is not None and start < at:
                tail = range(start, at)
        return [summary, *tail, *range(summary + 1, n)], summary, len(tail)
    return list(range(n)), -1, 0


def head_tail(text: str, limit: int, config: ForkConfig) -> str:
    head, tail = int(limit * config.head_ratio), int(limit * config.tail_ratio)
    cut = len(text) - head - tail
    return text[:head] + f"\n...[truncated {cut} chars]...\n" + text[len(text) - tail :]


def label(role: str | None) -> str:
    if role == "user":
        return "User"
    if role == "assistant":
        return "Agent"
    return role[0].upper() + role[1:] if role else "Unknown"


def preamble(stats: dict[str, Any], config: ForkConfig) -> str:
    tiers = stats["tier_distribution"]
    lines = [
        "You are working with forked context from a parent agent session.",
        "Context processing applied:",
        "- Compaction summary included (messages before compaction removed)"
        if stats["compaction_detected"]
        else "- No compaction detected",
        f"- Tool results: {tiers['tier1']} full, {tiers['tier2']} truncated to "
        f"{config.tier2_limit} chars, {tiers['tier3']} truncated to {config.tier3_limit} chars",
    ]
    if stats["compacted_results"]:
        lines.append(
            f"- {stats['compacted_results']} tool results were already cleared by compaction"
        )
    if stats["removed_messages"]:
        lines.append(
            f"- {stats['removed_messages']} oldest messages removed to fit "
            f"{config.char_budget} char budget"
        )
    else:
        lines.append("- All messages preserved")
    if stats["hard_capped"]:
        lines.append(f"- The newest message was cut to fit the {config.char_budget} char budget")
    lines.append(
        "If you need complete file contents or detailed results, re-read the files directly."
    )
    return "\n".join(lines)
