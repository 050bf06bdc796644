"""The repository is self-contained, and its citations of docs/design.md hold.

* No tracked file points outside the repository at the founding notes it grew from.
* Every ``docs/design.md §N`` (or ``§N.M``) in the code and docs names a numbered section that
  exists, and every ``docs/design.md#anchor`` link names a heading (GitHub's slugs).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
#: spelled in pieces so that this file does not match itself
OUTSIDE = ("../" + "shared", "shared/" + "DESIGN")
CITATION = re.compile(r"docs/design\.md\s*§\s*(\d+(?:\.\d+)*)")
ANCHOR = re.compile(r"docs/design\.md#([A-Za-z0-9_-]+)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*$")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def text_of(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data:  # binary (images)
        return None
    return data.decode("utf-8", errors="replace")


def headings() -> list[str]:
    lines = DESIGN.read_text(encoding="utf-8").splitlines()
    out, fenced = [], False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            out.append(m.group(2))
    return out


def section_numbers() -> set[str]:
    numbers = set()
    for title in headings():
        m = re.match(r"(\d+(?:\.\d+)*)\.?\s", title)
        if m:
            numbers.add(m.group(1))
    return numbers


def github_slug(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def citations() -> list[tuple[str, int, str]]:
    """(file, line, section) of every ``docs/design.md §N`` in the tracked files."""
    found = []
    for path in tracked_files():
        if path.suffix not in (".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt"):
            continue
        text = text_of(path)
        for i, line in enumerate((text or "").splitlines(), 1):
            found.extend((str(path.relative_to(ROOT)), i, m.group(1)) for m in CITATION.finditer(line))
    return found


def test_no_tracked_file_points_outside_the_repository() -> None:
    offenders = []
    for path in tracked_files():
        text = text_of(path)
        if text is None:
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if any(s in line for s in OUTSIDE):
                offenders.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert offenders == [], "the repository must not point outside itself:\n" + "\n".join(offenders)


def test_design_doc_has_the_numbered_sections_code_relies_on() -> None:
    numbers = section_numbers()
    for top in ("1", "2", "3", "4", "5"):
        assert top in numbers, f"docs/design.md lost section {top}"
    titles = headings()
    assert "Arms, seeds and intervals" in titles and "Crossings and censoring" in titles


def test_every_design_citation_names_an_existing_section() -> None:
    found = citations()
    assert found, "no docs/design.md §N citation found: is CITATION still right?"
    numbers = section_numbers()
    missing = [f"{f}:{line}: §{n}" for f, line, n in found if n not in numbers]
    assert missing == [], (f"citations of sections docs/design.md does not have "
                           f"(it has {sorted(numbers)}):\n" + "\n".join(missing))


def test_every_design_anchor_link_names_a_heading() -> None:
    slugs = {github_slug(t) for t in headings()}
    missing = []
    for path in tracked_files():
        if path.suffix != ".md":
            continue
        text = text_of(path) or ""
        missing.extend(f"{path.relative_to(ROOT)}: #{a}" for a in ANCHOR.findall(text) if a not in slugs)
    assert missing == [], "links to headings docs/design.md does not have:\n" + "\n".join(missing)


def test_every_mlflow_name_of_the_contract_is_in_the_design() -> None:
    from scalesweep import mlflow_names

    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    names = [v for k, v in vars(mlflow_names).items() if k.isupper() and isinstance(v, str)]
    names += [n for k, v in vars(mlflow_names).items() if k.isupper() and isinstance(v, tuple)
              for n in v]
    missing = [n for n in names if f"`{n}" not in design]
    assert len(names) > 15 and missing == []
