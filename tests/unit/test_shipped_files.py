"""Every shipped study and recipe works: each file in sweeps/ plans, each in recipes/ previews,
and each sweep's header comment names the exact command that runs it (torchtune's rule)."""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from scalesweep.orchestrator.cli import build_parser, main
from scalesweep.orchestrator.spec.files import load_mapping
from scalesweep.orchestrator.spec.recipes import read_recipe
from tests.support.helpers import SCALESWEEP

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = sorted(p for p in (ROOT / "sweeps").iterdir() if p.suffix in (".yaml", ".yml"))
RECIPES = sorted(p for p in (ROOT / "recipes").iterdir() if p.is_file())


def header(path: Path) -> list[str]:
    """The comment lines before the first line of YAML."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return lines


def test_there_are_shipped_files() -> None:
    assert {p.name for p in SWEEPS} >= {"smoke.yaml", "wenet_4v16.yaml", "scaling_rules.yaml"}
    assert {p.name for p in RECIPES} >= {"wenet_conformer.yaml", "deepspeed_onecycle.json"}
    # everything in those directories is a study or a recipe: nothing is skipped silently
    assert len(SWEEPS) == len(list((ROOT / "sweeps").iterdir()))


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_sweep_plans(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    rc = main(["plan", str(path), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    rows = json.loads(out)
    assert rows
    names = [r["name"] for r in rows]
    assert len(set(names)) == len(names)
    for row in rows:
        assert row["total_updates"] >= 1 and row["updates_per_epoch"] >= 1
        assert math.isfinite(row["peak_lr"]) and row["peak_lr"] > 0
        if row["backend"] == "simulate":
            assert row["feasible"], row["reason"]  # a laptop runs every simulated study
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_sweep_header_names_its_run_command(path: Path) -> None:
    lines = header(path)
    command = f"scalesweep run sweeps/{path.name}"
    runs = [line for line in lines if "scalesweep run" in line]
    assert runs, f"{path.name}: the header comment has no `scalesweep run` command"
    assert any(re.search(rf"(^|\s){re.escape(command)}$", line) for line in runs), runs
    assert len(lines) > 1, "the header should also say what the study shows"
    # the command is one the CLI accepts, naming a file that exists (from the project root)
    argv = shlex.split(runs[0].split("scalesweep", 1)[1])
    args = build_parser().parse_args(argv)
    assert args.command == "run" and (ROOT / args.sweep).resolve() == path.resolve()


def test_study_names_are_unique() -> None:
    """The name is the MLflow experiment: two studies must not share one."""
    names = [load_mapping(p)["name"] for p in SWEEPS]
    assert len(set(names)) == len(names), names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_recipe_reads_and_previews(path: Path, tmp_path: Path) -> None:
    recipe = read_recipe(path)
    assert recipe.kind in ("wenet", "deepspeed")
    assert recipe.settings.get("scheduler") and recipe.settings.get("optimizer")
    proc = subprocess.run([str(SCALESWEEP), "lr", str(path), "--updates", "200"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    head, *rows = proc.stdout.strip().split("\n")
    assert head in ("update,lr", "update,lr,momentum")
    assert len(rows) == 200
    for i, row in enumerate(rows, start=1):
        k, lr, *_ = row.split(",")
        assert int(k) == i
        assert math.isfinite(float(lr)) and float(lr) > 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", [p for p in RECIPES if p.suffix in (".yaml", ".yml")],
                         ids=lambda p: p.name)
def test_recipe_header_commands_name_the_file(path: Path) -> None:
    for line in header(path):
        for match in re.finditer(r"scalesweep (?:lr|plan|run) (\S+)", line):
            assert match.group(1) == f"recipes/{path.name}", line


def test_the_sweep_file_reference_is_a_valid_sweep(tmp_path: Path) -> None:
    """The annotated sweep file of docs/sweep-file.md is loaded like any sweep: every key it
    shows exists, with a value of the right type."""
    from scalesweep.orchestrator.spec.load import load_sweep

    page = (ROOT / "docs" / "sweep-file.md").read_text(encoding="utf-8")
    section = page[page.index("# The sweep file"):]
    block = section[section.index("```yaml\n") + len("```yaml\n"):section.index("```\n", 8)]
    path = tmp_path / "sweeps" / "reference.yaml"
    path.parent.mkdir()
    path.write_text(block.replace("recipes/", f"{ROOT}/recipes/"), encoding="utf-8")
    sweep = load_sweep(path, [])
    assert sweep.spec.name == "wenet-4v16" and sweep.spec.training.checkpoint_every_s == 60


# --- README and docs: a short README, and links that lead somewhere ---------------------------
#: a Markdown link or image: [text](target) or ![alt](target)
MD_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose(text: str) -> list[str]:
    """The page's lines outside fenced code blocks, with inline code spans blanked."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"`[^`]*`", "``", line))
    return out


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown page (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or not (m := MD_HEADING.match(line)):
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2))  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    broken = []
    for line in prose(page.read_text(encoding="utf-8")):
        for target in MD_LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            name, _, anchor = target.partition("#")
            dest = (page.parent / name).resolve() if name else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: ({target}): no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: ({target}): no such heading")
    return broken


def test_the_readme_is_short() -> None:
    """The README is what, install, a first example and links; the reference is in docs/."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move reference to docs/"


def test_the_readme_keeps_the_quick_start() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_an_existing_file(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_sees_links() -> None:
    """The check reads links, images and anchors, and ignores code (so it cannot pass vacuously)."""
    links = [t for page in PAGES for line in prose(page.read_text(encoding="utf-8"))
             for t in MD_LINK.findall(line)]
    assert "docs/img/epochs_ratio_by_level.png" in links and "docs/commands.md" in links
    assert any(t.startswith("../benchmarks/") for t in links)
    assert "comparing-runs-in-the-mlflow-ui" in anchors(ROOT / "docs" / "commands.md")
    assert prose("```\n[x](nowhere.md)\n```\n`[y](nowhere.md)`") == ["``"]
