"""The CLI's help is as complete as docs/commands.md: every command, option and positional has
help text and shows its default; a bare ``scalesweep`` lists the commands; ``--version``."""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Iterator
from importlib import metadata

import pytest

import scalesweep
from scalesweep.orchestrator import cli
from tests.support.helpers import SCALESWEEP


def parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every sub-command parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def actions() -> list[tuple[argparse.ArgumentParser, argparse.Action]]:
    return [(p, a) for p in parsers(cli.build_parser()) for a in p._actions]


def name(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    return f"{parser.prog} {'/'.join(action.option_strings) or action.dest}"


def shows_default(action: argparse.Action) -> bool:
    """A default worth printing: not a flag's, not None (the help says what happens without)."""
    d = action.default
    return not (d is None or d is argparse.SUPPRESS or isinstance(d, bool) or d == [])


def test_every_option_and_positional_has_help_text() -> None:
    missing = [name(p, a) for p, a in actions()
               if not a.help or a.help == argparse.SUPPRESS or not a.help.strip()]
    assert missing == []
    assert len(actions()) > 60  # the walk reached every command


def test_every_command_has_a_line_in_the_command_list() -> None:
    top = cli.build_parser()
    (sub,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    listed = {c.dest: c.help for c in sub._choices_actions}
    assert set(listed) == set(cli.COMMANDS) and all(listed.values())


def test_every_default_is_shown_in_the_help() -> None:
    unshown = []
    for parser, action in actions():
        if not shows_default(action):
            continue
        text = parser._get_formatter()._expand_help(action)
        if "default" not in text or str(action.default) not in text:
            unshown.append(f"{name(parser, action)}: {text!r}")
    assert unshown == []
    assert any(a.dest == "port" and shows_default(a) for _, a in actions())


def test_help_exits_through_main_with_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--summary-json PATH" in out and "sweep file" in out


def test_a_bare_scalesweep_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == cli.EXIT_INPUT
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: scalesweep")
    assert all(f"    {command}" in err for command in cli.COMMANDS)
    assert "error" not in err and "Traceback" not in err


def test_version_is_the_installed_distribution_s(capsys: pytest.CaptureFixture[str]) -> None:
    installed = metadata.version("scalesweep")
    assert scalesweep.__version__ == installed
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"scalesweep {installed}\n"
    # the console script, as a user runs it
    proc = subprocess.run([str(SCALESWEEP), "--version"], capture_output=True, text=True,
                          timeout=120)
    assert (proc.returncode, proc.stdout) == (0, f"scalesweep {installed}\n")


def test_version_without_package_metadata_says_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    # a source tree that was never installed: no metadata to read
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert scalesweep._version() == "0+unknown"


def test_lr_has_no_csv_flag_that_does_nothing() -> None:
    # CSV is what lr always prints; a --csv that changed nothing was removed
    assert not any("--csv" in a.option_strings for _, a in actions())
