"""Records as tables: what a JSON file holds, one DataFrame row per object."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """The records as a JSON file holds them (JSON's values: tuples as lists, keys as strings),
    one row each: the summary JSON, arms.json, ``plan --json``, ``predict --json``."""
    import pandas as pd

    return pd.DataFrame(json.loads(json.dumps(records, default=str)))
