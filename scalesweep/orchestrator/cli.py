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
    recommend,
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
                                 "predict": predict, "recommend": recommend, "solve": solve,
                                 "ui": ui}


#: what `scalesweep --help` says above the commands
DESCRIPTION = ("Sweep world size x warmup x lr-scaling rule over Ray Train workers, tracked in "
               "MLflow, and say how fast each setting converges. Start with `scalesweep plan "
               "sweeps/smoke.yaml`; every command: docs/commands.md. Exit codes: 0 success, 2 "
               "invalid input, 1 anything else.")


class _ArgumentError(Exception):
    pass


class _HelpFormatter(argparse.HelpFormatter):
    """Each option's help ends with its default, where it has one worth saying: not for flags
    (their help says what they turn on), not for None (the help says what happens without)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (default is None or default is argparse.SUPPRESS or isinstance(default, bool)
                or default == [] or "default" in text):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad arguments like every other input problem (exit 2), and shows
    every option's default."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:
        raise _ArgumentError(f"{self.prog}: {message}")


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked (the
    package metadata costs tens of milliseconds that every other command would pay)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        import scalesweep

        print(f"scalesweep {scalesweep.__version__}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="scalesweep", description=DESCRIPTION)
    p.add_argument("--version", action=_Version, help="print the version and exit")
    # not required: a bare `scalesweep` prints this help (main), not an error
    # typed as making plain parsers, which _Parser is, for the commands' add_parser
    sub = cast("Subparsers", p.add_subparsers(dest="command", parser_class=_Parser,
                                              title="commands", metavar="COMMAND",
                                              help="`scalesweep COMMAND --help` for its options"))
    for command in COMMANDS.values():
        command.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except _ArgumentError as exc:
            raise InputError("scalesweep", [Problem("arguments", " ".join(argv), str(exc))]) from None
        except SystemExit as exc:  # --help, --version: printed; main returns, as for any command
            return exc.code if isinstance(exc.code, int) else EXIT_OK
        if args.command is None:  # a bare `scalesweep`: the commands, on stderr as usage is
            parser.print_help(sys.stderr)
            return EXIT_INPUT
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
