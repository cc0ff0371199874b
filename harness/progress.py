"""Live progress on stderr: one line per gate (name, what runs now, elapsed seconds).

On a TTY the line is redrawn in place with \\r (and its seconds keep ticking); elsewhere (CI logs) every step
is its own line, so the log reads as a timeline, and a step that runs on without a new line gets a heartbeat line
every `heartbeat_s` (10 s), so a 30 s build or a long sanitizer run never looks like a hang. A gate with a time limit
(gates/watchdog.yaml) names it in those lines, so a reader of a stuck log knows when the watchdog will end it.
"""

from __future__ import annotations

import threading
import time
from typing import TextIO

from harness.results import GateResult

_CLEAR = "\x1b[K"  # erase to end of line


class Progress:
    def __init__(self, stream: TextIO, live: bool | None = None, tick_s: float = 0.5,
                 heartbeat_s: float = 10.0) -> None:
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.tick_s = tick_s
        self.heartbeat_s = heartbeat_s
        self._last_line = 0.0
        self._lock = threading.Lock()
        self._label = ""
        self._what = ""
        self._t0 = 0.0
        self._limit = ""
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def line(self, text: str) -> None:
        """A plain line (a notice), written so it does not mix with a live progress line."""
        with self._lock:
            self._write(("\r" + _CLEAR if self.live else "") + text + "\n")

    def start(self, label: str, limit_s: float | None = None) -> None:
        with self._lock:
            self._label, self._what, self._t0 = label, "starting", time.monotonic()
            self._limit = f"; time limit {limit_s:.0f} s" if limit_s is not None else ""
            self._draw()
        self._stop.clear()
        self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
        self._ticker.start()

    def step(self, what: str) -> None:
        with self._lock:
            self._what = what
            self._draw()

    def finish(self, result: GateResult) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        with self._lock:
            word = result.status.value.upper().replace("_", " ")
            text = f"{self._label}  {word}  {result.elapsed_s:.1f}s  {result.message}"
            self._write(("\r" + _CLEAR if self.live else "") + text + "\n")

    def _draw(self, suffix: str = "") -> None:
        text = f"{self._label}  {self._what}  {time.monotonic() - self._t0:.1f}s{suffix}"
        self._write("\r" + text + _CLEAR if self.live else text + "\n")
        self._last_line = time.monotonic()

    def _tick(self) -> None:
        period = self.tick_s if self.live else min(self.tick_s, self.heartbeat_s)
        while not self._stop.wait(period):
            with self._lock:
                if self.live:
                    self._draw()
                elif time.monotonic() - self._last_line >= self.heartbeat_s:
                    self._draw(f"  (still running{self._limit})")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
