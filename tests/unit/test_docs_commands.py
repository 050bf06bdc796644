"""Every shell command of README.md and docs/*.md that names ``scalesweep`` parses with the real
CLI's parser, names options its command has, and names shipped files that exist; the ones that
only read (``plan``, ``lr`` and ``--help``) run, in this process. The ones that cannot run here
(they train, serve, or need a store or a cluster) are listed below with the reason and where the
suite runs them instead (issue 48, item 8)."""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from scalesweep.orchestrator.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
#: the commands that run here: they read files only and finish in seconds (not with --address:
#: that plans on a cluster)
RUNS_HERE = {"plan", "lr"}
#: the others, and why they only parse here (each is run by the integration tests named)
PARSE_ONLY = {
    "run": "trains a sweep on Ray (tests/integration/test_run_e2e.py runs the smoke sweep)",
    "resume": "needs an interrupted sweep (tests/integration/test_ctrl_c.py, test_checkpoint_faults.py)",
    "report": "needs a finished study in a store (tests/integration/test_run_e2e.py, test_api_run.py)",
    "ui": "serves until stopped (tests/integration/test_ui_browser.py starts and stops it)",
    "submit": "needs a Ray cluster's job server (tests/integration/test_cluster.py, test_submit_python.py)",
    "solve": "trains a search and its verification (tests/integration/test_solve_e2e.py)",
    "predict": "needs a finished study in a store (tests/integration/test_api_run.py)",
    "advise": "needs a finished study in a store (tests/unit/test_advice.py logs one to sqlite and runs it)",
    "recommend": "needs a finished study in a store (tests/unit/test_recommend_cli.py logs one to "
                 "sqlite and runs it)",
}
#: what a synopsis writes where a value goes: such a command is checked option by option
PLACEHOLDER = re.compile(r"\.\.\.|…|[\[\]<>]|\b[A-Z][A-Z_]{2,}\b")


@dataclass(frozen=True)
class DocCommand:
    where: str
    text: str
    #: in a shell block (a command to type) rather than named in prose (`scalesweep plan`)
    fenced: bool = True

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)

    @property
    def synopsis(self) -> bool:
        return bool(PLACEHOLDER.search(self.text.replace("$(", "").replace("$", "")))


def _normal(line: str) -> str | None:
    """The command after `scalesweep`, without the prompt, the path to it or a trailing comment;
    None for a line that does not run scalesweep."""
    line = re.sub(r"^\$ ", "", line.strip())
    m = re.match(r"^(?:\S*/)?(?:python -m )?scalesweep(\s.*)?$", line)
    if m is None:
        return None
    rest = (m.group(1) or "").strip()
    rest = re.sub(r"\s+#.*$", "", rest)
    return rest


def doc_commands() -> list[DocCommand]:
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(ROOT))
        for block in re.findall(r"```(?:bash|sh|console|shell)\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                if (cmd := _normal(line)) is not None:
                    out.append(DocCommand(name, cmd))
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for span in re.findall(r"`([^`\n]+)`", prose):
            if span.startswith(("scalesweep ", ".venv/bin/scalesweep ")) and (cmd := _normal(span)):
                out.append(DocCommand(name, cmd, fenced=False))
    return out


COMMANDS = doc_commands()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _top_level(cmd: DocCommand) -> bool:
    """`scalesweep --version`, or a synopsis such as `scalesweep COMMAND --help`."""
    return not cmd.argv or cmd.argv[0].startswith("-") or bool(PLACEHOLDER.fullmatch(cmd.argv[0]))


def test_the_docs_name_commands_and_every_command_is_accounted_for() -> None:
    assert len(COMMANDS) >= 60  # the extraction found the docs' commands
    subs = set(_subparsers(build_parser()))
    assert {c.argv[0] for c in COMMANDS if not _top_level(c)} <= subs
    assert subs == RUNS_HERE | set(PARSE_ONLY), subs ^ (RUNS_HERE | set(PARSE_ONLY))


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: f"{c.where}: {c.text[:60]}")
def test_a_documented_command_names_a_command_and_its_options(cmd: DocCommand) -> None:
    argv, parser = cmd.argv, build_parser()
    subs = _subparsers(parser)
    if _top_level(cmd):
        command, known = parser, set(parser._option_string_actions)
    else:
        assert argv[0] in subs, f"{cmd.where}: `scalesweep {cmd.text}` names no command"
        command, known = subs[argv[0]], set(subs[argv[0]]._option_string_actions) | {"--help"}
    options = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
    assert options <= known | {"--help"}, (f"{cmd.where}: `scalesweep {cmd.text}`: "
                                           f"{sorted(options - known)} unknown to `{command.prog}`")


def _typed(cmd: DocCommand) -> bool:
    """A command to type as it stands: in a shell block, and no synopsis."""
    return cmd.fenced and not cmd.synopsis


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if _typed(c) and "--help" not in c.argv
                                 and "--version" not in c.argv], ids=lambda c: f"{c.where}: {c.text[:60]}")
def test_a_concrete_command_parses_and_its_shipped_files_exist(cmd: DocCommand) -> None:
    try:
        build_parser().parse_args(cmd.argv)
    except SystemExit as e:
        pytest.fail(f"{cmd.where}: `scalesweep {cmd.text}` does not parse (exit {e.code})")
    for arg in cmd.argv[1:]:
        if re.match(r"^(sweeps|recipes|examples)/", arg):
            assert (ROOT / arg).exists(), f"{cmd.where}: `scalesweep {cmd.text}` names {arg}: not shipped"


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if _typed(c) and "--address" not in c.text and (
                                 _top_level(c) or c.argv[0] in RUNS_HERE or "--help" in c.argv)],
                         ids=lambda c: f"{c.where}: {c.text[:60]}")
def test_a_documented_read_only_command_runs(cmd: DocCommand, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # from the repository (the docs' paths are relative to it), writing what it writes to tmp
    monkeypatch.chdir(ROOT)
    argv = [str(tmp_path / Path(a).name) if a.endswith(".png") else a for a in cmd.argv]
    assert main(argv) == 0, f"{cmd.where}: `scalesweep {cmd.text}` failed: {capsys.readouterr().err[-2000:]}"
