"""Telling a parent session what its background tasks did: exactly once, across processes.

A notice is saved in the store in the same transaction as the state change that caused it. The
`NoticeCourier` owns a loop (like `EventFollower`) that, for each parent with due notices:
waits while the parent is busy (a message slipped into a running turn changes what the model
answers), and in ``all_done`` mode while any of its tasks still runs; claims the parent's
notices in the store (a claim that expires, so a dead courier's notices are taken up again);
looks for each notice's id in the parent's recent messages, the last guard against a second
delivery after an uncertain failure; sends the rest in ONE prompt; deletes them. A failed
delivery releases the claim with a backoff.

Wake modes: ``"each"`` and ``"all_done"`` send the notices as a prompt the parent's agent answers,
with the agent and model of the parent's last user message; ``"never"`` adds them without a
reply (``noReply``). Every delivery ends with how many of the parent's tasks still run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..config import ForkConfig
from ..reference.truncate import cut_head_tail
from .backend import JSON, PromptRequest, SessionBackend
from .config import TaskManagerConfig
from .errors import BackendError, SessionNotFoundError
from .jobs import PassLoop
from .markdown import code, code_label
from .models import Notice, NoticeKind, Task, now_ms
from .retries import task_attempts
from .store import TaskStore
from .usage import usage_detail

log = logging.getLogger(__name__)

#: how many of the parent's newest messages the duplicate guard reads
GUARD_WINDOW = 100
#: parents served at once in one pass
PARALLEL_PARENTS = 16


def notice_tag(notice_id: str) -> str:
    """The first line of every notice; also how a retry recognises a delivered one."""
    return f"[asyncagents notice {notice_id}]"


#: how a notice cuts a long result: as the fork pipeline cuts a long tool output (head 80 %,
#: tail 20 %, a marker saying how many characters are left out)
NOTICE_CUT = ForkConfig()
#: the default of `TaskManagerConfig.notice_result_chars`
NOTICE_RESULT_CHARS = 4000
NO_REPLY = "(the task finished without a text reply)"


def result_cut_line(task_id: str, total: int) -> str:
    """The line after a cut result: where the whole of it is."""
    read = code(f'asyncagents_output(task_id="{task_id}")')
    return f"The result above is cut; it has {total:,} characters. Read all of it with {read}."


def result_block(task_id: str, result: str, limit: int) -> str:
    """`result` as a notice carries it: whole when it fits in `limit` characters, else its
    head and tail around the marker, then `result_cut_line`."""
    if len(result) <= limit:
        return result
    return f"{cut_head_tail(result, limit, NOTICE_CUT)}\n{result_cut_line(task_id, len(result))}"


def usage_line(task: Task) -> str:
    """One line of tokens and cost: the task's, or this turn's and all turns' after a resume."""
    if task.resume_count == 0:
        return f"Usage: {usage_detail(task.usage)}."
    return (
        f"Usage: this turn {usage_detail(task.turn_usage)}; all turns {usage_detail(task.usage)}."
    )


def _notice_parts(
    notice_id: str, task: Task, kind: NoticeKind, note: str = ""
) -> tuple[str, str | None, str]:
    """(text before the result, the result or None, text after it) of one ended turn; `note`
    (a line) comes just before the last line, which is always the usage."""
    head = f"{notice_tag(notice_id)}\n"
    usage = f"{note}\n{usage_line(task)}" if note else usage_line(task)
    model = f"Model: {task.model}\n" if task.model else ""
    attempts = task_attempts(task)
    if attempts:
        model += attempts + "\n"
    read = code(f'asyncagents_output(task_id="{task.id}")')
    where = f"Read it again with {read}."
    label = code_label(task)
    resume = code(f'asyncagents_task(resume="{task.id}", prompt=...)')
    if kind is NoticeKind.ERROR:
        return (
            f"{head}Background task {label} failed: {task.description}\n"
            f"{model}Error: {task.error}\n{where} Start a new asyncagents_task to try again."
            f"\n{usage}",
            None,
            "",
        )
    if kind is NoticeKind.RESUME_FAILED:
        return (
            f"{head}Background task {label} could not answer your follow-up: "
            f"{task.description}\n{model}Error: {task.error}\n"
            "The task is completed again and keeps its previous result. "
            f"{where} Resume it with {resume}.\n{usage}",
            None,
            "",
        )
    result = task.result or NO_REPLY
    if kind is NoticeKind.RESUME_COMPLETED:
        return (
            f"{head}Background task {label} answered your follow-up: {task.description}\n"
            f"{model}Full response:\n",
            result,
            f"\n\n{where}\n{usage}",
        )
    return (
        f"{head}Background task {label} completed: {task.description}\n{model}Result:\n",
        result,
        f"\n\n{where} Continue it with {resume}.\n{usage}",
    )


def build_notice(
    notice_id: str,
    task: Task,
    kind: NoticeKind,
    result_chars: int = NOTICE_RESULT_CHARS,
    note: str = "",
) -> Notice:
    """The notice of one ended turn, its result cut to `result_chars` (and `note`, a line,
    before its usage line); it keeps the whole result and where it sits in the text, so a
    delivery of many can cut them all further."""
    before, result, after = _notice_parts(notice_id, task, kind, note)
    if result is None:
        return Notice(
            id=notice_id,
            task_id=task.id,
            parent_session_id=task.parent_session_id,
            kind=kind,
            turn=task.turn,
            text=before,
            backend=task.backend,
        )
    block = result_block(task.id, result, result_chars)
    return Notice(
        id=notice_id,
        task_id=task.id,
        parent_session_id=task.parent_session_id,
        kind=kind,
        turn=task.turn,
        text=before + block + after,
        backend=task.backend,
        result=result,
        result_span=(len(before), len(before) + len(block)),
    )


def format_notice(
    notice_id: str, task: Task, kind: NoticeKind, result_chars: int = NOTICE_RESULT_CHARS
) -> str:
    """The text the parent reads for one ended turn."""
    return build_notice(notice_id, task, kind, result_chars).text


def shares(lengths: list[int], budget: int) -> list[int]:
    """How many characters each of several results may keep so that together they keep at
    most `budget`: the short ones whole, the rest an equal share of what is left."""
    out = list(lengths)
    if sum(lengths) <= budget:
        return out
    left = budget
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for rank, index in enumerate(order):
        share = left // (len(order) - rank)
        out[index] = min(lengths[index], share)
        left -= out[index]
    return out


def bounded_texts(notices: Sequence[Notice], budget: int) -> list[str]:
    """The notices' texts, their results cut so that together they carry at most `budget`
    characters of results."""
    results = [n.result if n.result is not None and n.result_span else "" for n in notices]
    allowed = shares([len(r) for r in results], budget)
    texts: list[str] = []
    for notice, result, limit in zip(notices, results, allowed, strict=True):
        if notice.result_span is None or notice.result is None or len(result) <= limit:
            texts.append(notice.text)
            continue
        start, end = notice.result_span
        block = result_block(notice.task_id, result, limit)
        texts.append(notice.text[:start] + block + notice.text[end:])
    return texts


def running_line(running: int) -> str:
    """The last line of every delivery: how many of the parent's tasks still run."""
    if running == 0:
        return "You have no background tasks still running."
    if running == 1:
        return "You have 1 background task still running."
    return f"You have {running} background tasks still running."


def format_delivery(
    notices: Sequence[Notice], running: int, result_chars: int | None = None
) -> str:
    """One prompt for all the notices delivered to a parent at once, oldest first; with
    `result_chars`, their results together keep at most that many characters."""
    texts = (
        [n.text for n in notices] if result_chars is None else bounded_texts(notices, result_chars)
    )
    return "\n\n".join([*texts, running_line(running)])


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parent_agent_and_model(messages: Sequence[JSON]) -> tuple[str | None, dict[str, str] | None]:
    """The agent and model of the newest user message (OpenCode's ``info.agent``,
    ``info.model.providerID/modelID``): a wake prompt runs as the parent's own turn would."""
    for message in reversed(messages):
        info = _dict(_dict(message).get("info"))
        if info.get("role") != "user":
            continue
        agent = info.get("agent")
        model = _dict(info.get("model"))
        provider, model_id = model.get("providerID"), model.get("modelID")
        return (
            agent if isinstance(agent, str) and agent else None,
            {"providerID": provider, "modelID": model_id}
            if isinstance(provider, str) and isinstance(model_id, str)
            else None,
        )
    return None, None


def _texts(messages: Sequence[JSON]) -> str:
    return "\n".join(
        str(part.get("text") or "")
        for message in messages
        for part in _dict(message).get("parts") or ()
        if isinstance(part, dict)
    )


class NoticeCourier:
    """Delivers the pending notices of one backend; owns its loop (`start` / `stop`)."""

    def __init__(
        self,
        backend: SessionBackend,
        store: TaskStore,
        config: TaskManagerConfig,
        *,
        owner: str,
        backend_name: str,
        running_tasks: Callable[[str], Awaitable[int]],
        on_parent_gone: Callable[[str], Awaitable[object]] | None = None,
    ) -> None:
        self._backend = backend
        self._store = store
        self._config = config
        self._owner = owner
        self._backend_name = backend_name
        self._running_tasks = running_tasks
        self._on_parent_gone = on_parent_gone
        self._loop = PassLoop(
            "notice-courier",
            self.deliver_due,
            config.notice_interval,
            log,
            "notice delivery pass failed",
        )
        self._pass_lock = asyncio.Lock()
        self.delivered = 0

    # -- loop ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the delivery loop (idempotent); it makes a first pass at once."""
        self._loop.start()

    async def stop(self) -> None:
        """Stop the loop; a delivery in flight is abandoned (its claim expires)."""
        await self._loop.stop()

    def poke(self) -> None:
        """Look at the pending notices now (a notice was queued, or a parent went idle)."""
        self._loop.poke()

    # -- delivery -----------------------------------------------------------------------------

    async def pending(self, parent_session_id: str | None = None) -> list[Notice]:
        """Every notice of this backend not delivered yet, oldest first."""
        return await self._store.notices(parent_session_id, backend=self._backend_name)

    async def deliver_due(self, parent_session_id: str | None = None) -> int:
        """One pass: deliver what is due to every parent ready for it. Returns how many."""
        async with self._pass_lock:
            now = now_ms()
            parents: dict[str, None] = {}
            for notice in await self.pending(parent_session_id):
                claimable = notice.claimed_by is None or (notice.claim_expires_at or 0) <= now
                if notice.next_attempt_at <= now and claimable:
                    parents[notice.parent_session_id] = None
            if not parents:
                return 0
            busy: set[str] = set()
            if self._config.wait_for_idle_parent:
                try:
                    busy = set((await self._backend.status()).keys())
                except BackendError as exc:
                    log.info("notices wait: the server's status failed: %s", exc)
                    return 0
            limit = asyncio.Semaphore(PARALLEL_PARENTS)

            async def serve(parent: str) -> int:
                async with limit:
                    return await self._serve_parent(parent)

            counts = await asyncio.gather(*(serve(p) for p in parents if p not in busy))
            return sum(counts)

    async def _serve_parent(self, parent: str) -> int:
        if self._config.wake == "all_done" and await self._running_tasks(parent) > 0:
            return 0  # one wake when the last one ends
        claimed = await self._store.claim_notices(
            self._owner,
            self._backend_name,
            self._config.notice_claim_ttl,
            parent_session_id=parent,
        )
        if not claimed:
            return 0
        try:
            return await self._deliver(parent, claimed)
        except asyncio.CancelledError:
            raise
        except SessionNotFoundError:
            log.info("parent %s is gone; dropping %d notice(s)", parent, len(claimed))
            for notice in claimed:
                await self._store.delete_notice(notice.id)
            if self._on_parent_gone is not None:
                await self._on_parent_gone(parent)
            return 0
        except Exception as exc:
            for notice in claimed:
                await self._release(notice, exc)
            return 0

    async def _deliver(self, parent: str, claimed: list[Notice]) -> int:
        recent = await self._backend.messages(parent, limit=GUARD_WINDOW)
        seen = _texts(recent)
        fresh: list[Notice] = []
        for notice in claimed:
            if notice_tag(notice.id) in seen:
                # delivered by an attempt whose answer was lost: never twice
                await self._store.delete_notice(notice.id)
            else:
                fresh.append(notice)
        if not fresh:
            return 0
        text = format_delivery(
            fresh, await self._running_tasks(parent), self._config.notice_result_chars
        )
        if self._config.wake == "never":
            await self._backend.prompt(parent, PromptRequest(text=text, no_reply=True))
        else:
            agent, model = parent_agent_and_model(recent)
            await self._backend.prompt_async(
                parent, PromptRequest(text=text, agent=agent, model=model)
            )
        for notice in fresh:
            await self._store.delete_notice(notice.id)
        self.delivered += len(fresh)
        return len(fresh)

    async def _release(self, notice: Notice, exc: Exception) -> None:
        notice.attempts += 1
        notice.last_error = f"{type(exc).__name__}: {exc}"
        delay = min(
            self._config.notice_retry_max,
            self._config.notice_retry_initial * 2 ** (notice.attempts - 1),
        )
        notice.next_attempt_at = now_ms() + int(delay * 1000)
        log.info("notice %s not delivered (attempt %d): %s", notice.id, notice.attempts, exc)
        try:
            await self._store.release_notice(notice)
        except Exception as store_exc:
            log.warning("notice %s: release failed (%s); its claim expires", notice.id, store_exc)
