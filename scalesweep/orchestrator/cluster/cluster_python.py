"""Which Python a submitted sweep runs on the cluster, and whether it can: the client side of
the probe ``scalesweep submit`` runs before it ships anything (``cluster_probe.py`` is the side
that runs there).

Why: a job's entrypoint is a shell command, and its ``python`` is whatever comes first on the
head's PATH -- not necessarily the interpreter of Ray's own workers. ``.venv/bin/ray start``
without the venv activated starts workers with the venv's python (``ray start``'s own
``sys.executable``), while the entrypoint's ``python`` is the system's, without torch: the job
then dies with ``ModuleNotFoundError`` and no hint. So the sweep's job runs with the workers'
interpreter by its absolute path, and is not submitted at all where that interpreter lacks
scalesweep's dependencies.

How: ``submit`` has only the Jobs API address, so the probe is a job too. Its entrypoint cannot
just run ``python`` (the very thing in question), and a job's environment names no interpreter
(the entrypoint inherits the JobSupervisor's environment, and a Ray worker's command line is
overwritten with ``ray::JobSupervisor``). What does name it is the raylet: it starts every worker
with its ``--python_worker_command=<interpreter> ...``, and the JobSupervisor that runs the
entrypoint is one of its workers. So the entrypoint (POSIX sh) walks up its parents in ``/proc``
to the raylet and takes that command's first word; where that fails (no ``/proc``) it falls back
to ``python3``/``python`` on PATH and says so. That interpreter runs ``cluster_probe.py``, which
runs one Ray task on the head (no CPUs, so a busy cluster cannot delay it) that imports each
dependency and reports ``sys.executable``, its version and the packages' versions: what a Ray
task really runs, not what we guessed. The probe ships only its own file (no project tree). It
costs a job start, a driver connecting, a worker's start and the imports: 21 s on an idle 2-core
test machine (8 s until the probe runs, 0.7 s connecting, 12 s for the task, of which 7.6 s are
the imports), 37 s on the same machine under load. The imports are real ones, not a look for
the files: an installed torch whose shared libraries do not load fails the job just the same.

What is fatal (an :class:`InputError`, exit 2, docs/design.md §4.1, nothing submitted): a
dependency that does not import there, or a different Python major.minor (the sweep is
validated here by the code that will run there, and Ray itself refuses a client of another
minor, e.g. ``run --address ray://``). A different package version, or Python patch level, is
a warning printed before submitting.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from scalesweep.orchestrator.cluster import cluster_probe
from scalesweep.orchestrator.cluster.cluster_probe import MARK, PACKAGES
from scalesweep.orchestrator.spec.errors import InputError, Problem

__all__ = ["SCRIPT", "Verdict", "check", "local_report", "parse_report", "probe_entrypoint"]

#: the probe's file name in its job's working_dir
SCRIPT = "scalesweep_cluster_probe.py"
HOW_TO_FIX = ("install scalesweep's dependencies into that environment ({exe} -m pip install "
              "<your scalesweep checkout>, or your pinned requirements), or start Ray from an "
              "environment that has them (activate it, then `ray start`); see docs/cluster.md §7, "
              "\"What submit checks first\". Nothing was submitted")
HOW_TO_FIX_PYTHON = ("start Ray there from a Python {here} environment that has scalesweep's "
                     "dependencies (activate it, then `ray start`), or submit from a Python "
                     "{there} one; see docs/cluster.md §7, \"What submit checks first\". "
                     "Nothing was submitted")


def probe_entrypoint() -> str:
    """The probe job's entrypoint: find the Ray workers' interpreter, run the probe with it."""
    no_python = json.dumps({"found_by": "none", "error": (
        "no interpreter found: the raylet's --python_worker_command could not be read from /proc, "
        "and there is no python3 or python on the head's PATH")})
    # $PPID is the JobSupervisor (a Ray worker); its ancestors lead to the raylet. A /proc/PID/stat
    # line is "pid (comm) state ppid ...": the parent is the second field after the ")".
    # list2cmdline (how Ray writes the worker command) quotes a path with spaces in "...".
    return "\n".join([
        "py=; how=; p=$PPID",
        'while [ -z "$py" ] && [ "${p:-0}" -gt 1 ] && [ -r "/proc/$p/cmdline" ]; do',
        "  cmd=$(tr '\\000' '\\n' < \"/proc/$p/cmdline\" | sed -n 's/^--python_worker_command=//p')",
        '  case "$cmd" in',
        "    '\"'*) py=${cmd#\\\"}; py=${py%%\\\"*}; how=raylet ;;",
        "    ?*) py=${cmd%% *}; how=raylet ;;",
        "  esac",
        "  p=$(sed 's/.*) //' \"/proc/$p/stat\" | cut -d' ' -f2)",
        "done",
        'if [ -z "$py" ]; then py=$(command -v python3 || command -v python); how=PATH; fi',
        f'if [ -z "$py" ]; then echo {shlex.quote(MARK + no_python)}; exit 3; fi',
        f'exec "$py" {SCRIPT} "$how"',
    ])


def parse_report(logs: str) -> dict[str, Any] | None:
    """The probe's report from its job's logs (the last marked line), or None."""
    lines = [ln for ln in logs.splitlines() if ln.startswith(MARK)]
    if not lines:
        return None
    try:
        report = json.loads(lines[-1][len(MARK):])
    except ValueError:
        return None
    return report if isinstance(report, dict) else None


def local_report() -> dict[str, Any]:
    """The same facts about this machine, without importing the heavy packages (their installed
    versions are what the comparison needs; the local validation already imported what it uses)."""
    return {**cluster_probe.interpreter(), "packages": cluster_probe.packages(do_import=False)}


def _version(v: Any) -> str:
    return ".".join(str(x) for x in v) if isinstance(v, list | tuple) else str(v)


def _public(version: str) -> str:
    # torch 2.5.1+cu124 on a GPU head against 2.5.1+cpu on a laptop is the install docs/cluster.md
    # asks for, not a mismatch: compare versions without their local label
    return version.split("+", 1)[0]


@dataclass
class Verdict:
    """What the probe found: the interpreter the job must run, what stops it, what to note."""

    address: str
    executable: str
    python: str
    flags: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    fix: str = ""  # how to fix the problems, when there are any

    @property
    def command(self) -> list[str]:
        """The job's interpreter: the workers' own, by its absolute path, with their flags."""
        return [self.executable, *self.flags]

    def error(self) -> InputError:
        where = f"the cluster at {self.address} runs Ray workers with {self.executable or '?'}"
        if self.python:
            where += f" (Python {self.python})"
        fix = self.fix or HOW_TO_FIX.format(exe=self.executable or "that python")
        return InputError(where, [*self.problems, Problem("how to fix", self.executable or None, fix)])


def check(address: str, remote: dict[str, Any], local: dict[str, Any]) -> Verdict:
    """Compare the probe's ``remote`` report with ``local``'s (both as ``cluster_probe`` makes
    them): fatal problems and warnings, each naming the package, both versions and the
    interpreter."""
    exe = str(remote.get("executable") or remote.get("driver_executable") or "")
    rpy, lpy = remote.get("python") or [], local.get("python") or []
    verdict = Verdict(address, exe, _version(rpy) if rpy else "", list(remote.get("flags") or []))
    found_by = remote.get("found_by")
    if remote.get("error"):
        how = ("the first python on the head's PATH (the raylet's worker command could not be read)"
               if found_by == "PATH" else "the Ray workers' interpreter")
        verdict.problems.append(Problem("ray", exe or None, f"{how} {exe or ''} cannot run the probe: "
                                        f"{remote['error']}".replace("  ", " ")))
    elif not exe.startswith("/"):
        verdict.problems.append(Problem("executable", exe or None, "the Ray workers' sys.executable "
                                        "is not an absolute path, so the job could not name it"))
    if rpy and lpy and list(rpy[:2]) != list(lpy[:2]):
        # another interpreter is the fix, not packages for that one
        verdict.fix = HOW_TO_FIX_PYTHON.format(here=_version(lpy[:2]), there=_version(rpy[:2]))
        verdict.problems.append(Problem(
            "python", _version(rpy),
            f"{exe} is Python {_version(rpy)}, this machine runs {_version(lpy)}: the major.minor "
            "versions must match (Ray requires one Python major.minor for a cluster and its "
            "clients, and the sweep is validated here with what will run there)"))
    elif rpy and lpy and list(rpy) != list(lpy):
        verdict.warnings.append(f"the cluster's Ray workers ({exe}) run Python {_version(rpy)}, "
                                f"this machine {_version(lpy)}")
    theirs: dict[str, Any] = remote.get("packages") or {}
    ours: dict[str, Any] = local.get("packages") or {}
    for name in PACKAGES:
        there, here = theirs.get(name) or {}, ours.get(name) or {}
        have = f"{name} {here['version']}" if here.get("version") else f"{name}: not installed either"
        if not there.get("imports"):
            if not theirs and remote.get("error"):
                continue  # nothing was imported there: the error above says why
            missing = str(there.get("error") or "").startswith("ModuleNotFoundError") or not there
            verdict.problems.append(Problem(
                name, "missing" if missing else "fails to import",
                f"{exe} cannot import {name} ({there.get('error') or 'not reported'}); here: {have}"))
        elif there.get("version") and here.get("version") \
                and _public(str(there["version"])) != _public(str(here["version"])):
            verdict.warnings.append(f"the cluster's Ray workers ({exe}) have {name} {there['version']}, "
                                    f"this machine {here['version']}")
    return verdict


def describe(verdict: Verdict) -> str:
    """One line for the user: which interpreter the job runs."""
    return (f"cluster at {verdict.address}: Ray workers run {verdict.executable} (Python "
            f"{verdict.python}), which imports scalesweep's dependencies; the job runs with it")

