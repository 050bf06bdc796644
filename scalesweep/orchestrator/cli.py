"""The `scalesweep` command. Exit codes: 0 success, 2 invalid input, 1 anything else."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, Protocol, cast

from scalesweep.orchestrator.commands import (
    advise,
    lr,
    plan,
    predict,
    report,
    resume,
    run,
    solve,
    submit,
    ui,
)
from scalesweep.orchestrator.commands._common import EXIT_ERROR, EXIT_INPUT, EXIT_OK, Subparsers
from scalesweep.orchestrator.spec.errors import InputError, Problem

__all__ = ["COMMANDS", "EXIT_ERROR", "EXIT_INPUT", "EXIT_OK", "build_parser", "main"]


class _Command(Protocol):
    """What each module of scalesweep/orchestrator/commands/ provides."""

    def add_parser(self, sub: Subparsers) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


#: each command's module, in the order --help lists them
COMMANDS: dict[str, _Command] = {"plan": plan, "lr": lr, "run": run, "submit": submit,
                                 "resume": resume, "report": report, "advise": advise,
                                 "predict": predict, "solve": solve, "ui": ui}


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments like every other input problem (exit 2)."""

    def error(self, message: str) -> Any:
        raise _ArgumentError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="scalesweep", description=__doc__)
    # typed as making plain parsers, which _Parser is, for the commands' add_parser
    sub = cast("Subparsers", p.add_subparsers(dest="command", required=True, parser_class=_Parser))
    for command in COMMANDS.values():
        command.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            args = build_parser().parse_args(argv)
        except _ArgumentError as exc:
            raise InputError("scalesweep", [Problem("arguments", " ".join(argv), str(exc))]) from None
        return COMMANDS[args.command].run(args)
    except InputError as exc:
        print(f"error: {exc.message()}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:
        if os.environ.get("SCALESWEEP_DEBUG"):
            raise
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        print("(set SCALESWEEP_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_ERROR
