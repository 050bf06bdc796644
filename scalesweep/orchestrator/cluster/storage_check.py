"""Before a multi-node sweep starts: does every node see the sweep's storage?

Tune's experiment state, Ray Train's checkpoints and the sweep directory live under one storage
path. On a cluster of more than one node that path must be shared (NFS and the like, or a URI
such as ``s3://...`` where the runner supports one): a restarted worker group on another node
must find the checkpoints the old one wrote, and the driver must find the Tune state. A local
directory that merely exists on every node looks fine until the first restart, so the check is
real: the driver writes a marker with a random token under the path, and a tiny task pinned to
each alive node must read that token back. Single-node clusters and URIs skip it.
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scalesweep.orchestrator.spec.errors import InputError, Problem

DEFAULT_TIMEOUT_S = 60.0
MARKER_PREFIX = ".scalesweep-storage-check-"
HOW_TO_FIX = ("mount storage every node shares (NFS, a cloud filesystem) at this path on every "
              "node, or set SCALESWEEP_STORAGE to a directory that every node mounts at the same "
              "path; then run again")


@dataclass(frozen=True)
class NodeResult:
    node_id: str
    address: str
    ok: bool
    detail: str  # why not, when not ok

    @property
    def label(self) -> str:
        return f"node {self.node_id[:12]} at {self.address}"


def is_uri(location: str) -> bool:
    """``s3://``, ``gs://``, ``abfss://``...: storage Ray reaches through pyarrow, not a mount."""
    scheme, sep, _ = location.partition("://")
    return bool(sep) and scheme.lower() != "file" and scheme.isascii() and scheme.replace("+", "").isalnum()


def local_path(location: str | Path) -> Path | None:
    """The filesystem path a storage location names, or None for a URI."""
    text = str(location)
    if is_uri(text):
        return None
    return Path(text.removeprefix("file://")).expanduser().resolve()


def alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def check_shared_storage(location: str | Path, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Raise :class:`InputError` (exit 2) naming every node that cannot read what the driver
    writes under ``location``. Needs ``ray.init`` done; starts nothing but one zero-CPU task
    per node."""
    root = local_path(location)
    if root is None:
        return
    nodes = alive_nodes()
    if len(nodes) <= 1:
        return
    results = probe(root, nodes, timeout_s)
    bad = [r for r in results if not r.ok]
    if bad:
        raise InputError(
            f"shared storage check ({len(bad)} of {len(results)} nodes cannot read {root})",
            [*(Problem(r.label, str(root), r.detail) for r in bad),
             Problem("how to fix", str(root), HOW_TO_FIX)])


def probe(root: Path, nodes: list[dict[str, Any]], timeout_s: float) -> list[NodeResult]:
    """Write a marker under ``root`` and have each node read it back."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = secrets.token_hex(16)
    created = _mkdirs(root)
    marker = root / f"{MARKER_PREFIX}{token}"
    try:
        marker.write_text(token)
        reader = ray.remote(_make_reader())
        refs = {
            n["NodeID"]: reader.options(
                num_cpus=0, max_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
            ).remote(str(marker))
            for n in nodes
        }
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        done = set(ready)
        results = []
        for n in nodes:
            ref = refs[n["NodeID"]]
            address = str(n.get("NodeManagerAddress") or n.get("NodeManagerHostname") or "?")
            if ref not in done:
                ray.cancel(ref, force=True)
                results.append(NodeResult(n["NodeID"], address, False,
                                          f"did not answer within {timeout_s:g} s"))
                continue
            try:
                seen: str | None = ray.get(ref)
            except Exception as exc:  # the node died, or could not run a task at all
                results.append(NodeResult(n["NodeID"], address, False,
                                          f"could not run the check ({type(exc).__name__})"))
                continue
            if seen == token:
                results.append(NodeResult(n["NodeID"], address, True, ""))
            else:
                why = seen if seen and seen.startswith(("no ", "cannot ")) else "reads other content"
                results.append(NodeResult(n["NodeID"], address, False,
                                          f"does not see the marker the driver wrote there ({why})"))
        return results
    finally:
        with contextlib.suppress(OSError):
            marker.unlink()
        for d in reversed(created):  # only what we made, and only if still empty
            with contextlib.suppress(OSError):
                d.rmdir()


def _make_reader() -> Any:
    # A closure, so cloudpickle ships it by value: the nodes need not have scalesweep installed
    # (``run --address host:port`` brings no code of ours to the cluster).
    def read_marker(path: str) -> str:
        try:
            with open(path) as f:
                return f.read()
        except FileNotFoundError:
            return "no such file on this node"
        except OSError as exc:
            return f"cannot read it: {exc.strerror or exc}"

    return read_marker


def _mkdirs(path: Path) -> list[Path]:
    """``mkdir -p``, returning the directories it created, outermost first."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    path.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))
