"""What every study report shares: the end of the first screen of ``study.md`` (what ``hf-trajpe study``
prints last) and the JSON encoding of report data."""

from __future__ import annotations

import numpy as np

__all__ = ["DETAILS", "first_screen", "json_default"]

#: the line that ends the first screen of study.md (what ``hf-trajpe study`` prints last)
DETAILS = "## Details"


def first_screen(study_md: str) -> str:
    """The first screen of a ``study.md``: its title and summary, up to the details."""
    return study_md.split("\n" + DETAILS, 1)[0].rstrip() + "\n"


def json_default(x):
    """``json.dumps`` default for report data: NumPy scalars as numbers, tuples as lists, else text."""
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, tuple):
        return list(x)
    return str(x)
