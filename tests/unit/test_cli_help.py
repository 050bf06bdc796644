"""The CLI's help is as complete as docs/commands.md: every command, option and positional has
help text and shows its default; a bare ``scalesweep`` lists the commands; ``--version``;
``ui --host`` refuses what cannot be bound and warns before exposing MLflow."""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

import scalesweep
from scalesweep.orchestrator import cli
from scalesweep.orchestrator.commands import ui
from scalesweep.orchestrator.tracking import sqlite_template
from scalesweep.orchestrator.tracking import ui as tracking_ui
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


# --- ui --host --------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "::1", "::", "localhost",
                                  "mlflow.example.org", "10.0.0.5"])
def test_ui_host_takes_an_address_or_a_host_name(host: str) -> None:
    assert ui.host_problem(host) is None


@pytest.mark.parametrize("host", ["", "http://0.0.0.0", "0.0.0.0:5000", "my host", "a..b",
                                  "-x.org", "host/path"])
def test_ui_host_refuses_what_cannot_be_bound(host: str, capsys: pytest.CaptureFixture[str]
                                              ) -> None:
    problem = ui.host_problem(host)
    assert problem is not None and (problem.path, problem.value) == ("--host", host)
    # through the CLI: exit 2 naming the field, the value and the rule; nothing served
    assert cli.main(["ui", f"--host={host}"]) == cli.EXIT_INPUT
    err = capsys.readouterr().err
    assert "--host" in err and repr(host) in err and "IP address or a host name" in err


@pytest.mark.parametrize(("host", "exposed"), [("127.0.0.1", False), ("127.0.0.2", False),
                                               ("localhost", False), ("::1", False),
                                               ("0.0.0.0", True), ("::", True),
                                               ("192.168.1.5", True), ("mlflow.example.org", True)])
def test_ui_warns_when_the_host_is_not_loopback(host: str, exposed: bool) -> None:
    warning = ui.exposure_warning(host, 5000)
    assert (warning is not None) == exposed
    if warning is not None:
        assert warning.startswith(f"warning: --host {host}:") and "no login" in warning


def test_ui_serves_on_the_host_given_and_warns_first(monkeypatch: pytest.MonkeyPatch, cwd: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # serve stands in for MLflow's server (a unit test starts none): the host it would bind
    bound: list[Any] = []
    assert sqlite_template.seed_new_store("sqlite:///mlflow.db")  # ui reads a store that is there

    def serve(uri: str, port: int, host: str) -> int:
        bound.append((host, port, capsys.readouterr().err))
        return 0

    monkeypatch.setattr(tracking_ui, "serve", serve)
    assert cli.main(["ui", "--host", "0.0.0.0", "--port", "5055",
                     "--tracking-uri", f"sqlite:///{cwd / 'mlflow.db'}"]) == 0
    ((host, port, err),) = bound
    assert (host, port) == ("0.0.0.0", 5055) and "every network interface" in err
    assert cli.main(["ui"]) == 0 and bound[1][:2] == ("127.0.0.1", 5000) and bound[1][2] == ""
