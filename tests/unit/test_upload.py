"""What `submit` uploads (scalesweep.orchestrator.cluster.upload) and how it handles credentials in
a tracking URI (scalesweep.orchestrator.tracking.credentials), on a planted checkout: real
secret-looking files, an ignored data folder, a symlink out of the tree."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scalesweep.orchestrator.cluster import submit as sub
from scalesweep.orchestrator.cluster import upload
from scalesweep.orchestrator.spec.errors import InputError
from scalesweep.orchestrator.tracking import credentials
from tests.support.helpers import SWEEPS, scalesweep

#: planted in the checkout; none may reach the cluster
SECRETS = (".env", "config/.env.production", "deploy/server.pem", "deploy/tls.key", "id_rsa",
           ".aws/credentials", ".ssh/id_ed25519", "home/.netrc", "notes.db", "cache/runs.sqlite")
SHIPPED = ("train.py", "sweeps/mine.yaml", "pkg/__init__.py", "new_module.py")


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    for rel in (*SHIPPED, *SECRETS, "data/big.bin", ".venv/bin/python"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"contents of {rel}\n")
    (root / ".gitignore").write_text("data/\n.venv/\n")
    (root / "passwd_link").symlink_to("/etc/passwd")
    _git(root, "init", "-q")
    # a secret committed by mistake is still never shipped
    _git(root, "add", "train.py", "sweeps/mine.yaml", "pkg/__init__.py", ".gitignore",
         "config/.env.production")
    _git(root, "commit", "-q", "-m", "init")
    return root  # new_module.py and the other plants stay untracked, not ignored


def _names(m: upload.Manifest) -> set[str]:
    return {path for path, _ in m.files}


def test_a_git_checkout_ships_what_git_lists_minus_secrets_and_links(checkout: Path) -> None:
    m = upload.manifest(checkout)
    assert m.how.startswith("git ls-files")
    assert _names(m) == {*SHIPPED, ".gitignore"}
    left = dict(m.left_out)
    assert set(SECRETS) <= set(left) and "passwd_link" in left
    assert "symbolic link" in left["passwd_link"] and "never shipped" in left["id_rsa"]
    assert not any(p.startswith(("data/", ".venv/")) for p in left)  # ignored: not even listed


def test_without_git_the_deny_list_keeps_the_same_files_out(checkout: Path) -> None:
    shutil.rmtree(checkout / ".git")
    m = upload.manifest(checkout)
    assert m.how.startswith("every file but")
    shipped = _names(m)
    assert not shipped & set(SECRETS) and "passwd_link" not in shipped
    assert not any(p.startswith(".venv/") for p in shipped)
    assert set(SHIPPED) <= shipped


def test_the_upload_holds_exactly_the_manifest_and_the_sweep(checkout: Path) -> None:
    with sub.shipment(str(checkout / "sweeps" / "mine.yaml"), [], None, root=checkout) as ship:
        tree = ship.directory
        found = {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file() or p.is_symlink()}
    assert found == {*SHIPPED, ".gitignore"} and ship.sweep == "sweeps/mine.yaml"


def test_an_upload_over_the_cap_is_refused_by_name(checkout: Path) -> None:
    (checkout / "weights.bin").write_bytes(b"\0" * 300_000)  # untracked, not ignored: listed
    with pytest.raises(InputError) as err, \
            sub.shipment(str(checkout / "sweeps" / "mine.yaml"), [], None, max_upload=100_000, root=checkout):
        pass
    (problem,) = err.value.problems
    assert problem.path == "--max-upload" and "weights.bin 293.0 KB" in problem.rule
    assert upload.parse_size("500MB") == 500 * 1024**2 and upload.parse_size("2gb") == 2 * 1024**3
    assert upload.parse_size("1234") == 1234


@pytest.mark.parametrize(("uri", "clean", "env"), [
    ("http://alice:s3cr%40t@mlflow.example:5000/path", "http://mlflow.example:5000/path",
     {credentials.USERNAME: "alice", credentials.PASSWORD: "s3cr@t"}),
    ("https://token@h", "https://h", {credentials.USERNAME: "token"}),
    ("http://[::1]:5000", "http://[::1]:5000", {}),
    ("sqlite:////data/mlflow.db", "sqlite:////data/mlflow.db", {}),
    # a PostgreSQL store's driver (libpq) reads these; MLflow's own variables are http only
    ("postgresql://bob:p%3Aw@db.example:5432/mlflow", "postgresql://db.example:5432/mlflow",
     {credentials.PG_USER: "bob", credentials.PG_PASSWORD: "p:w"}),
    ("postgresql+psycopg2://bob@db/mlflow", "postgresql+psycopg2://db/mlflow", {credentials.PG_USER: "bob"}),
])
def test_credentials_leave_the_uri(uri: str, clean: str, env: dict[str, str]) -> None:
    assert credentials.split(uri) == (clean, env)


def test_credentials_nothing_would_read_are_refused_by_name() -> None:
    with pytest.raises(InputError) as err:
        credentials.split("mysql://root:hunter2@db/mlflow")
    (problem,) = err.value.problems
    assert problem.path == "--tracking-uri" and "hunter2" not in str(err.value)
    assert "mysql://***@db/mlflow" in str(err.value) and "nothing reads them" in problem.rule


def test_dry_run_lists_the_upload_and_never_shows_the_credentials(tmp_path: Path) -> None:
    done = scalesweep("submit", str(SWEEPS / "smoke.yaml"), "--dry-run",
                      "--tracking-uri", "http://alice:hunter2@mlflow.example:5000", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "hunter2" not in done.stdout + done.stderr and "alice" not in done.stdout + done.stderr
    assert "the job would run: python -m scalesweep run sweeps/smoke.yaml --address auto " \
           "--tracking-uri http://mlflow.example:5000" in done.stdout
    assert "tracking credentials: passed in the job's environment" in done.stdout
    assert "scalesweep/orchestrator/cli.py" in done.stdout and ".venv" not in done.stdout


def test_run_refuses_such_a_uri_with_exit_2_and_starts_nothing(tmp_path: Path) -> None:
    done = scalesweep("run", str(SWEEPS / "smoke.yaml"), "--tracking-uri", "mysql://root:hunter2@db/mlflow",
                      cwd=tmp_path)
    assert done.returncode == 2 and "hunter2" not in done.stdout + done.stderr
    assert "--tracking-uri = 'mysql://***@db/mlflow'" in done.stderr and list(tmp_path.iterdir()) == []
