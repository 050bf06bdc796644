"""Where a use case's progress lines go: the caller's callbacks, never this process's stdout
unless the caller is the CLI and says so."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TextIO

#: the library's logger: a notebook sees the progress of a run with logging.basicConfig(level=INFO)
LOGGER = logging.getLogger("scalesweep")


@dataclass(frozen=True)
class Progress:
    """Two callbacks, one line each call: ``info`` (a trial started, a round ended, where the
    sweep keeps its state) and ``warn`` (a report that could not be made, MLflow that did not
    answer). ``console`` names the streams the lines already go to when the layers below print
    them (the CLI): then nothing is redirected and the output is the CLI's, byte for byte."""

    info: Callable[[str], None]
    warn: Callable[[str], None]
    console: tuple[TextIO, TextIO] | None = None

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """For the call's duration, what the layers below write to stdout and stderr (the run
        loop's and the Tune callback's progress) goes to ``info`` and ``warn``, line by line;
        for a console progress, to its two streams."""
        if self.console is not None:
            out, err = self.console
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                yield
            return
        out_lines, err_lines = _Lines(self.info), _Lines(self.warn)
        try:
            with contextlib.redirect_stdout(out_lines), contextlib.redirect_stderr(err_lines):
                yield
        finally:
            out_lines.flush_rest()
            err_lines.flush_rest()


def logged(logger: logging.Logger = LOGGER) -> Progress:
    """Progress as log records of ``logger`` (INFO and WARNING): the library's default."""
    return Progress(info=logger.info, warn=logger.warning)


def console(out: TextIO | None = None, err: TextIO | None = None) -> Progress:
    """Progress printed, as the CLI prints it: ``out`` (default stdout) and ``err`` (stderr).
    ``solve --json`` passes stderr as ``out``: its stdout is the answer alone."""
    out_stream, err_stream = out or sys.stdout, err or sys.stderr

    def say(stream: TextIO) -> Callable[[str], None]:
        return lambda line: print(line, file=stream, flush=True)

    return Progress(info=say(out_stream), warn=say(err_stream), console=(out_stream, err_stream))


class _Lines(io.TextIOBase):
    """A text stream that hands each complete line to ``emit`` (a partial one waits for its
    newline, or for the end of the call)."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        super().__init__()
        self._emit = emit
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._emit(line)
        return len(text)

    def flush_rest(self) -> None:
        if self._partial:
            self._emit(self._partial)
            self._partial = ""
