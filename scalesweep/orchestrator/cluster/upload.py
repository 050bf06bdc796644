"""What `submit` uploads as the job's working_dir, and nothing else (docs/cluster.md §7).

In a git checkout: the files git would commit, tracked or new but not ignored (``git ls-files
--cached --others --exclude-standard``), so whatever ``.gitignore`` keeps out of the repository
stays off the cluster too. Elsewhere (no git, or a plain install): the tree minus EXCLUDES.
In both cases files that look like secrets, and local databases (NEVER), are not shipped
even when git lists them, symbolic links are not followed (a link may point anywhere: it is
left out and named), and the total is capped (``--max-upload``, default MAX_UPLOAD_BYTES).
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

#: never shipped without git: environments, VCS, local MLflow stores, sweep state, reports,
#: caches, data and model files
EXCLUDES = (".venv", "venv", ".git", "mlruns", "mlartifacts", "scalesweep_runs", "reports",
            "test-artifacts", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache",
            "*.egg-info", "build", "dist", ".ipynb_checkpoints", "*.pyc", "node_modules",
            "*.db", "*.db-*", "*.sqlite", "*.sqlite3", "*.pt", "*.ckpt", "*.safetensors")
#: never shipped, git or not: credentials and keys, and local databases (an MLflow or app store)
NEVER = (".env", ".env.*", "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_ed25519*",
           "id_ecdsa*", "id_dsa*", ".netrc", ".pgpass", ".git-credentials", "credentials",
           "credentials.json", ".aws", ".ssh", ".gnupg", ".azure", ".kube", ".docker",
           "*.keystore", "*.jks", "*.db", "*.db-*", "*.sqlite", "*.sqlite3")
MAX_UPLOAD_BYTES = 100 * 1024**2


@dataclass
class Manifest:
    """The files to upload (relative POSIX paths) and what was left out, with why."""

    root: Path
    files: list[tuple[str, int]] = field(default_factory=list)  # (path, bytes)
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    how: str = ""

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)

    def describe(self) -> str:
        lines = [f"{len(self.files)} files, {human(self.size)} ({self.how}) from {self.root}:"]
        lines += [f"  {path}  {human(size)}" for path, size in self.files]
        if self.left_out:
            lines.append(f"left out ({len(self.left_out)}):")
            lines += [f"  {path}  ({why})" for path, why in self.left_out]
        return "\n".join(lines)


def human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def parse_size(text: str) -> int:
    """``--max-upload``: bytes, or a number with KB, MB or GB (powers of 1024)."""
    t = text.strip().upper().replace(" ", "")
    for unit, factor in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024), ("B", 1)):
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * factor)
    return int(t)


def _matches(rel: str, patterns: tuple[str, ...]) -> str | None:
    """The pattern one of the path's parts matches (a folder's match covers what is in it)."""
    for part in PurePosixPath(rel).parts:
        for pattern in patterns:
            if fnmatch.fnmatch(part, pattern):
                return pattern
    return None


def _git_files(root: Path) -> list[str] | None:
    if not (root / ".git").exists() or shutil.which("git") is None:
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return sorted({p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p})


def _walk(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if _matches(rel, EXCLUDES) is None and (path.is_file() or path.is_symlink()):
            out.append(rel)
    return out


def manifest(root: Path, only: tuple[str, ...] = ()) -> Manifest:
    """What to upload from ``root`` (``only``: top-level names to keep, for a plain install)."""
    listed = _git_files(root)
    m = Manifest(root, how="git ls-files: tracked and new files git does not ignore")
    if listed is None:
        listed, m.how = _walk(root), "every file but the excluded kinds (no git checkout)"
    for rel in listed:
        if only and PurePosixPath(rel).parts[0] not in only:
            continue
        path = root / rel
        if (never := _matches(rel, NEVER)) is not None:
            m.left_out.append((rel, f"never shipped ({never}: a secret or a local database)"))
        elif path.is_symlink():
            m.left_out.append((rel, "a symbolic link (not followed)"))
        elif path.is_file():
            m.files.append((rel, path.stat().st_size))
    return m


def copy(m: Manifest, dest: Path) -> None:
    """The manifest's files into ``dest``; a file that vanished meanwhile is skipped."""
    for rel, _ in m.files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(m.root / rel, target, follow_symlinks=False)
        except FileNotFoundError:
            continue
