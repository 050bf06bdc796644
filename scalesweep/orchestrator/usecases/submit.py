"""``submit``: a sweep sent to a Ray cluster as a job (Ray Jobs API), its logs followed to the
end (docs/cluster.md); or, ``dry_run``, what would be uploaded and run."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scalesweep.orchestrator.usecases.progress import Progress


def submit(sweep_file: str | Path, *, overrides: Sequence[str] = (), address: str | None,
           progress: Progress, tracking_uri: str | None = None, summary_json: Path | None = None,
           verbose: bool = False, dry_run: bool = False, max_upload: str = "100MB") -> int:
    """Submit ``sweep_file`` with its ``overrides`` (``--set``'s strings) to the cluster whose dashboard is
    at ``address`` (``http://HEAD:8265``, else ``RAY_ADDRESS``); the job's exit code. Its logs,
    and where its results are, go to ``progress``; ``summary_json``: the job's summary JSON is
    written there. ``dry_run``: nothing is contacted; the upload and the job's command go to
    ``progress``. Every input problem (the sweep's and these arguments', together) raises one
    ``InputError`` before anything is uploaded: the sweep is validated with them, so it is
    given as its file, which the job ships."""
    from scalesweep.orchestrator.cluster.submit import submit as submit_job

    # the Jobs client's own arguments, as `scalesweep submit` parses them
    args = argparse.Namespace(sweep=str(sweep_file), set=list(overrides), address=address,
                              tracking_uri=tracking_uri,
                              summary_json=None if summary_json is None else str(summary_json),
                              verbose=verbose, dry_run=dry_run, max_upload=max_upload)
    with progress.capture():
        return submit_job(args)
