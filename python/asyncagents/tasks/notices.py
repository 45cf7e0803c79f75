"""Telling a parent session what its background tasks did: exactly once, never dropped.

A notice is saved in the store in the same transaction as the state change that caused it, then
delivered as a ``noReply`` prompt to the parent. Delivery waits while the parent is busy (a
message slipped into a running turn changes what the model answers), failed deliveries are kept
and retried with backoff, and a retry after an uncertain failure first looks for the notice's
id in the parent's recent messages so it is never delivered twice.
"""

from __future__ import annotations

import asyncio
import logging

from .backend import PromptRequest, SessionBackend
from .errors import BackendError, SessionNotFoundError
from .models import Notice, NoticeKind, Task, now_ms
from .store import TaskStore

log = logging.getLogger(__name__)


def notice_tag(notice_id: str) -> str:
    """The first line of every notice; also how a retry recognises a delivered one."""
    return f"[asyncagents notice {notice_id}]"


def format_notice(notice_id: str, task: Task, kind: NoticeKind) -> str:
    """The text the parent reads."""
    head = notice_tag(notice_id)
    where = f'Read it again with asyncagents_output(task_id="{task.id}").'
    if kind is NoticeKind.ERROR:
        return (
            f"{head}\nBackground task {task.label} failed: {task.description}\n"
            f"Error: {task.error}\n{where} Start a new asyncagents_task to try again."
        )
    result = task.result or "(the task finished without a text reply)"
    if kind is NoticeKind.RESUME_COMPLETED:
        return (
            f"{head}\nBackground task {task.label} answered your follow-up: {task.description}\n"
            f"Full response:\n{result}\n\n{where}"
        )
    return (
        f"{head}\nBackground task {task.label} completed: {task.description}\n"
        f"Result:\n{result}\n\n{where} Continue it with "
        f'asyncagents_task(resume="{task.id}", prompt=...).'
    )


class NoticeCourier:
    """Delivers pending notices from a `TaskStore` through a `SessionBackend`."""

    def __init__(
        self,
        backend: SessionBackend,
        store: TaskStore,
        *,
        retry_initial: float = 1.0,
        retry_max: float = 60.0,
        wait_while_busy: bool = True,
    ) -> None:
        self._backend = backend
        self._store = store
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._wait_while_busy = wait_while_busy
        self._in_flight: set[str] = set()
        #: parents found deleted during delivery; the manager clears their tasks
        self.gone_parents: asyncio.Queue[str] = asyncio.Queue()
        self.delivered = 0

    def pending(self) -> list[Notice]:
        """Every notice not delivered yet."""
        return self._store.notices()

    async def deliver_due(
        self, *, parent_session_id: str | None = None, force: bool = False
    ) -> int:
        """Try every pending notice whose retry time has come (all of one parent when given).

        `force` ignores the backoff (the parent just went idle). Returns how many were delivered.
        """
        now = now_ms()
        due = [
            n
            for n in self._store.notices(parent_session_id)
            if (force or n.next_attempt_at <= now) and n.id not in self._in_flight
        ]
        if not due:
            return 0
        busy: set[str] = set()
        if self._wait_while_busy:
            try:
                busy = set((await self._backend.status()).keys())
            except BackendError as exc:
                for notice in due:
                    self._failed(notice, exc)
                return 0
        # one parent's notices go in order; parents run side by side
        by_parent: dict[str, list[Notice]] = {}
        for notice in due:
            if notice.parent_session_id not in busy:
                by_parent.setdefault(notice.parent_session_id, []).append(notice)
        results = await asyncio.gather(*(self._deliver_all(ns) for ns in by_parent.values()))
        return sum(results)

    async def _deliver_all(self, notices: list[Notice]) -> int:
        count = 0
        for notice in notices:
            if not await self.deliver(notice):
                break
            count += 1
        return count

    async def deliver(self, notice: Notice) -> bool:
        """Deliver one notice now; True when it is delivered (or its parent is gone)."""
        if notice.id in self._in_flight:
            return False
        self._in_flight.add(notice.id)
        try:
            current = self._store.get_notice(notice.id)
            if current is None:
                return True  # delivered by a concurrent pass, or cleared with its parent
            notice = current
            if notice.attempts > 0 and await self._already_there(notice):
                self._store.delete_notice(notice.id)
                return True
            await self._backend.prompt(
                notice.parent_session_id, PromptRequest(text=notice.text, no_reply=True)
            )
            self._store.delete_notice(notice.id)
            self.delivered += 1
            return True
        except SessionNotFoundError:
            log.info("parent %s is gone; dropping notice %s", notice.parent_session_id, notice.id)
            self._store.delete_notice(notice.id)
            self.gone_parents.put_nowait(notice.parent_session_id)
            return True
        except BackendError as exc:
            self._failed(notice, exc)
            return False
        finally:
            self._in_flight.discard(notice.id)

    async def _already_there(self, notice: Notice) -> bool:
        """After an uncertain failure: is the notice in the parent's recent messages already?"""
        tag = notice_tag(notice.id)
        for message in await self._backend.messages(notice.parent_session_id, limit=50):
            for part in message.get("parts") or ():
                if isinstance(part, dict) and tag in str(part.get("text") or ""):
                    return True
        return False

    def _failed(self, notice: Notice, exc: Exception) -> None:
        notice.attempts += 1
        notice.last_error = f"{type(exc).__name__}: {exc}"
        delay = min(self._retry_max, self._retry_initial * 2 ** (notice.attempts - 1))
        notice.next_attempt_at = now_ms() + int(delay * 1000)
        log.info("notice %s not delivered (attempt %d): %s", notice.id, notice.attempts, exc)
        if self._store.get_notice(notice.id) is not None:
            self._store.save_notice(notice)
