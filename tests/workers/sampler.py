"""`Sampler`: what an OpenCode server (real or fake) runs, read every 50 ms from
``GET /session/status`` in a thread: the caps tests compare the most child sessions ever busy
at once with each cap."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence

import httpx
from asyncagents.tasks import Task


class Sampler:
    """Every `every` s, the set of busy sessions of the server, in a thread."""

    def __init__(self, url: str, every: float = 0.05) -> None:
        self.url = url
        self.every = every
        self.samples: list[frozenset[str]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=5) as client:
            while not self._stop.is_set():
                begin = time.monotonic()
                try:
                    response = client.get("/session/status")
                    response.raise_for_status()
                    self.samples.append(frozenset(response.json()))
                except httpx.HTTPError:
                    self.errors += 1
                self._stop.wait(max(0.0, self.every - (time.monotonic() - begin)))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def most(self, tasks: Sequence[Task], key: str | None = None) -> int:
        """The most child sessions of `tasks` busy at once (per `key` value, the worst one)."""
        of_session = {t.session_id: t for t in tasks if t.session_id}
        worst = 0
        for busy in self.samples:
            children = [of_session[s] for s in busy if s in of_session]
            if key is None:
                worst = max(worst, len(children))
            else:
                counts = Counter(str(getattr(t, key)) for t in children)
                worst = max(worst, max(counts.values(), default=0))
        return worst
