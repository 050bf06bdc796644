"""A new SQLite tracking store is a copy of an empty, migrated one
(scalesweep.orchestrator.tracking.sqlite_template): what MLflow then holds is what it holds for
a store it made itself, an existing store is never touched, and anything unusual falls back to
MLflow's own migrations."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mlflow.store.db.utils import _get_latest_schema_revision, _get_schema_version
from mlflow.tracking import MlflowClient

from scalesweep.mlflow_names import store_uri_for_mlflow
from scalesweep.orchestrator.tracking import sqlite_template


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module: its template is made once (seconds), as on a user's machine."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def cache(cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(sqlite_template.CACHE_ENV, str(cache_dir))
    monkeypatch.chdir(tmp_path)
    return cache_dir


def _store(client: MlflowClient) -> list[tuple[str, str, str]]:
    return [(e.experiment_id, e.name, e.artifact_location) for e in client.search_experiments()]


def test_a_copied_store_holds_what_mlflow_makes_itself(cache: Path, tmp_path: Path) -> None:
    assert sqlite_template.seed_new_store("sqlite:///copied.db")
    assert (tmp_path / "copied.db").exists() and sqlite_template.template_path().exists()
    copied = MlflowClient(store_uri_for_mlflow("sqlite:///copied.db"))
    made = MlflowClient(store_uri_for_mlflow("sqlite:///made.db"))  # MLflow's own migrations
    # the Default experiment is MLflow's, with this store's artifact root: none in the template
    assert _store(copied) == _store(made) == [("0", "Default", str(tmp_path / "mlruns" / "0"))]
    import sqlalchemy

    for name in ("copied.db", "made.db"):
        engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path / name}")
        assert _get_schema_version(engine) == _get_latest_schema_revision()
        engine.dispose()
    assert (tmp_path / "copied.db").stat().st_mode & 0o777 == (tmp_path / "made.db").stat().st_mode & 0o777
    run = copied.create_run("0")
    copied.log_metric(run.info.run_id, "dev_loss", 0.5, step=4)
    assert copied.get_metric_history(run.info.run_id, "dev_loss")[0].value == 0.5


def test_the_template_is_made_once_and_an_existing_store_is_left_alone(cache: Path,
                                                                      tmp_path: Path) -> None:
    assert sqlite_template.seed_new_store(f"sqlite:///{tmp_path / 'a.db'}")
    template = sqlite_template.template_path()
    made = template.stat().st_mtime_ns
    MlflowClient(f"sqlite:///{tmp_path / 'a.db'}").create_experiment("kept")
    assert not sqlite_template.seed_new_store(f"sqlite:///{tmp_path / 'a.db'}")
    assert "kept" in [e.name for e in MlflowClient(f"sqlite:///{tmp_path / 'a.db'}").search_experiments()]
    assert sqlite_template.seed_new_store("sqlite:///b.db")
    assert template.stat().st_mtime_ns == made
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_store_that_appears_during_the_copy_is_not_overwritten(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    real_copy = shutil.copyfile

    def copy_while_another_driver_makes_it(src: str, dst: str) -> str:
        MlflowClient(store_uri_for_mlflow("sqlite:///raced.db")).create_experiment("theirs")
        return str(real_copy(src, dst))

    monkeypatch.setattr(shutil, "copyfile", copy_while_another_driver_makes_it)
    assert not sqlite_template.seed_new_store("sqlite:///raced.db")
    assert "theirs" in [e.name for e in MlflowClient(store_uri_for_mlflow("sqlite:///raced.db")).search_experiments()]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize("uri", ["sqlite://", "sqlite:///:memory:", "http://127.0.0.1:5000",
                                 "postgresql://u:p@127.0.0.1/db", "sqlite:///no/such/dir/m.db"])
def test_other_stores_are_left_to_mlflow(cache: Path, tmp_path: Path, uri: str) -> None:
    assert not sqlite_template.seed_new_store(uri)
    assert list(tmp_path.iterdir()) == []


def test_a_cache_that_cannot_be_written_leaves_the_store_to_mlflow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(sqlite_template.CACHE_ENV, str(tmp_path / "a-file"))  # no dir under a file
    monkeypatch.chdir(tmp_path)
    assert not sqlite_template.seed_new_store("sqlite:///m.db")
    assert not (tmp_path / "m.db").exists()
    made = MlflowClient(store_uri_for_mlflow("sqlite:///m.db"))
    assert [e.name for e in made.search_experiments()] == ["Default"]
    assert os.listdir(tmp_path) and not list(tmp_path.glob(".*.tmp"))
