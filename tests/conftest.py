"""Fixtures shared by several test files (helpers that are not fixtures: tests/support/helpers.py).

Imports of Ray and MLflow's server happen inside the fixtures, so a test file that uses none of
them does not pay for them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# --- Under CI=true a skip is a failure ------------------------------------------------------
# A skipped test checks nothing, so CI must not pass because of one. The only skips CI lets
# through are these reasons (the start of pytest.skip's message), each with why; docs/development.md
# lists them too. Outside CI (developers' machines) skips stay skips.
CI_ALLOWED_SKIPS: dict[str, str] = {
    # none: every skip in tests/ names a missing machine capability (chromium, root for a mount
    # namespace, a system python3 without ray/torch) that the CI machine has; install_test_tools.sh
    # fails CI where it cannot install chromium.
}


def _ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _skip_reason(longrepr: object) -> str:
    # a skip's longrepr is (path, line, "Skipped: reason")
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _allowed(reason: str) -> bool:
    return any(reason.startswith(allowed) for allowed in CI_ALLOWED_SKIPS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
        item: pytest.Item, call: pytest.CallInfo[None],
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # pytest.xfail() called in a test stops it there and checks nothing after: under CI a
    # failure, like a skip (a strict xfail marker is a known bug, listed, and fails on XPASS)
    if _ci() and call.excinfo is not None and call.excinfo.errisinstance(pytest.xfail.Exception):
        report.outcome = "failed"
        report.longrepr = f"pytest.xfail() under CI=true checks nothing after it: {call.excinfo.value}"
        if hasattr(report, "wasxfail"):
            del report.wasxfail
        return report
    # an xfail is reported as skipped with wasxfail; it is not a skip (strict xfails fail on XPASS)
    if _ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report.longrepr)
        if not _allowed(reason):
            report.outcome = "failed"
            report.longrepr = f"skipped under CI=true, which allows no such skip: {reason}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, pytest.CollectReport,
                                                                          pytest.CollectReport]:
    report = yield
    # a module that skips itself (pytest.skip(allow_module_level=True), importorskip)
    if _ci() and report.skipped:
        reason = _skip_reason(report.longrepr)
        if not _allowed(reason):
            report.outcome = "failed"
            report.longrepr = f"skipped under CI=true, which allows no such skip: {reason}"
    return report


# --- Timeouts ------------------------------------------------------------------------------
# pyproject.toml gives every test 300 s (pytest-timeout; fixtures count in the first test that
# sets them up). A slow test starts Ray clusters or servers and runs whole sweeps, with hang
# bounds of up to 600 s per subprocess, so it gets SLOW_TIMEOUT_S unless it carries a
# @pytest.mark.timeout(N) of its own (the longest ones: benchmarks, browser, wheel, elastic,
# resume).
SLOW_TIMEOUT_S = 900


#: A Ray on default settings takes fixed ports (the dashboard agent's 52365; the Ray Client
#: servers' 23000-24000), so two at once on this host clash. The tests that start one carry the
#: ``local_ray`` marker and are put in one xdist group: under ``--dist loadgroup``
#: (scripts/test.sh) one worker runs them one after another while the others run everything
#: else, whose clusters (tests/support/cluster_helpers.py; the worker's ``ray_head`` and ``ray_head4``,
#: which in-process tests join through ``ray_cluster``) take free ports of their own.
LOCAL_RAY_GROUP = "local_ray"


TESTS = Path(__file__).resolve().parent
#: fixtures that start a Ray: a unit test may ask for none of them
RAY_FIXTURES = ("ray_head", "ray_head4", "ray_cluster")


def _tier(item: pytest.Item) -> str:
    return item.path.resolve().relative_to(TESTS).parts[0]


def _check_unit(item: pytest.Item) -> None:
    """A test in tests/unit/ that asks for a Ray or is marked as one stops the run at collection:
    the fast tier would otherwise grow a cluster unnoticed."""
    fixtures = set(getattr(item, "fixturenames", ()))
    wrong = sorted(fixtures & set(RAY_FIXTURES)) + [
        f"@pytest.mark.{m}" for m in ("slow", "local_ray") if item.get_closest_marker(m)]
    if wrong:
        raise pytest.UsageError(f"{item.nodeid} is in tests/unit/ but uses {', '.join(wrong)}: "
                                "a test that starts a Ray, a server or a sweep goes in tests/integration/")


#: The modules whose tests join ``ray_head4`` (through ``ray_cluster``) form one xdist group
#: too: one worker runs them all, so one such head is started, not one per worker (each costs
#: its start-up and its daemons' polling for the rest of the session).
RAY_HEAD4_GROUP = "ray_head4"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    head4_modules = {item.path for item in items
                     if {"ray_head4", "ray_cluster"} & set(getattr(item, "fixturenames", ()))}
    for item in items:
        tier = _tier(item)
        if tier == "unit":
            _check_unit(item)
        elif tier == "integration":
            item.add_marker(pytest.mark.slow)  # so that -m "not slow" is the unit tier still
        if item.get_closest_marker("slow") and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
        if item.get_closest_marker("local_ray"):
            item.add_marker(pytest.mark.xdist_group(LOCAL_RAY_GROUP))
        elif item.path in head4_modules:
            item.add_marker(pytest.mark.xdist_group(RAY_HEAD4_GROUP))
        elif item.get_closest_marker("slow") and _uses_a_module_fixture(item):
            # a module's cluster or sweep is made once, on the worker that runs its tests
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker under --dist loadgroup, xdist puts each test's group into its node id
    (``...@local_ray``), and the controller schedules by that. pytest 9.2 keeps node ids where
    xdist 3.8 cannot write them, so the groups silently vanished and tests that start a Ray on
    its default ports ran at once on two workers (constraints.txt pins pytest 9.1). Stop
    instead of running a suite whose groups do not hold."""
    if not getattr(session.config.option, "loadgroup", False):  # set on xdist workers only
        return
    lost = [i.nodeid for i in session.items
            if i.get_closest_marker("local_ray") and not i.nodeid.endswith(f"@{LOCAL_RAY_GROUP}")]
    if lost:
        raise pytest.UsageError(f"xdist did not put {len(lost)} local_ray test(s) in their group "
                                f"(e.g. {lost[0]}): check the pytest and pytest-xdist pins")


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)  # pytest's fixture closure of the test
    if info is None:
        return False
    return any(defs and defs[-1].scope == "module" and defs[-1].baseid.startswith(item.nodeid.split("::")[0])
               for defs in (info.name2fixturedefs.get(n, ()) for n in info.names_closure))


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory (the test's current directory until it ends)."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@dataclass
class RayHead:
    """A local Ray head (one node, token auth) that CLI sweeps join instead of each starting a
    Ray of its own: ``scalesweep run *head.args()`` with ``**head.env()``."""

    address: str  # its GCS, host:port
    token: str

    def args(self) -> list[str]:
        return ["--address", self.address]

    def env(self) -> dict[str, str]:
        # a token alone: scalesweep turns on Ray's token mode for an explicit address itself
        return {"RAY_AUTH_TOKEN": self.token}


def _head(tmp_path_factory: pytest.TempPathFactory, name: str, cpus: int) -> Iterator[RayHead]:
    from tests.support.cluster_helpers import RayCluster
    from tests.support.helpers import ROOT

    # PYTHONPATH: the trials' workers import the tests' own workloads (tests.support.gated_workload, ...),
    # as a user's cluster has their workload's package installed
    # no dashboard: nothing run on these heads asks for the state API or submits a job (the
    # cluster tests start clusters of their own), and it is a head's largest idle CPU cost.
    # No log monitor: what the tests read is the drivers' own output, MLflow and files, never
    # a worker's stdout, and these heads live for the whole session
    head = RayCluster(tmp_path_factory.mktemp(name), head_cpus=cpus, nodes=1,
                      extra_env={"PYTHONPATH": str(ROOT)}, dashboard=False, log_monitor=False)
    try:
        head.start()
        yield RayHead(head.gcs_address, head.token)
    finally:
        head.stop()
    assert not head.leftover_pids(), f"processes of the session's {name} outlived it"


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayHead]:
    """One Ray head for the session's CLI sweeps whose subject is the sweep, not Ray's start-up
    (each local Ray costs seconds to start). As many CPUs as a local ``run`` gives itself
    (os.cpu_count()), so the trials are placed as they would be without --address. Its own
    ports and temp dir (tests/support/cluster_helpers.py): never another Ray on this host, never
    ``ray stop``. One per xdist worker."""
    yield from _head(tmp_path_factory, "ray_head", os.cpu_count() or 2)


@pytest.fixture(scope="session")
def ray_head4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayHead]:
    """A head of 4 CPUs for the in-process Ray tests (``ray_cluster``): real DDP groups of up to
    4 workers, one CPU each. One per xdist worker that runs such a test."""
    yield from _head(tmp_path_factory, "ray_head4", 4)


@pytest.fixture(scope="module")
def ray_cluster(ray_head4: RayHead) -> Iterator[None]:
    """This process joins a Ray of 4 CPUs (``ray_head4``, ports of its own) for the module's
    tests, and leaves it after them: its actors and workers end with the connection."""
    import ray

    from scalesweep.orchestrator.cluster.ray_auth import enable_token_auth

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    os.environ.pop("RAY_AUTH_MODE", None)
    os.environ["RAY_AUTH_TOKEN"] = ray_head4.token
    enable_token_auth(ray_head4.address)  # token mode for this process, as `run --address` does
    ray.init(address=ray_head4.address, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        ray._raylet.Config.initialize("")  # Ray's config reads the auth mode back (off again)


# --- MLflow's own tracking server, in this process, with a switch --------------------------


@dataclass
class MlflowHttp:
    """MLflow's REST handlers (the Flask app ``mlflow server`` runs) on 127.0.0.1, in a thread of
    the test process: a real HTTP tracking server without the seconds a server process takes
    to start. While ``down`` it answers every request 503; ``requests`` counts what reached
    the handlers, by path."""

    uri: str
    down: bool = False
    requests: list[str] = field(default_factory=list)
    #: while set, every request is held unanswered (a server that accepts and never answers)
    #: until ``release`` is set; ``held`` counts them
    hung: bool = False
    release: threading.Event = field(default_factory=threading.Event)
    held: int = 0

    def count(self, endpoint: str) -> int:
        return sum(1 for path in self.requests if path.endswith(endpoint))


@pytest.fixture(scope="session")
def mlflow_http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowHttp]:
    from mlflow.server import app, handlers
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from tests.support.wsgi_server import ServedApp

    root = tmp_path_factory.mktemp("mlflow_http")
    # The handlers build their store once per process from the environment and then set the
    # process's default tracking URI to it; handing them the store keeps that default alone.
    store = SqlAlchemyStore(f"sqlite:///{root / 'server.db'}", str(root / "artifacts"))
    handlers._tracking_store = store  # type: ignore[assignment]
    state = MlflowHttp(uri="")

    def switch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if state.hung:
            state.held += 1
            state.release.wait(timeout=120)  # bounded: a test that died cannot hold it forever
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"was hung for the test"]
        if state.down:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"down for the test"]
        state.requests.append(str(environ.get("PATH_INFO", "")))
        return app(environ, start_response)

    server = ServedApp(switch).start()
    state.uri = server.uri
    try:
        yield state
    finally:
        state.release.set()
        server.stop()
        handlers._tracking_store = None
