"""What RULER's two string-match scores share: is a reference string in a generated answer (case-insensitive)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["found", "check_pairs"]


def found(prediction: str, references: Sequence[str]) -> list[float]:
    """1.0 for each reference found in ``prediction``, ignoring case (RULER's ``r.lower() in pred.lower()``)."""
    text = prediction.lower()
    return [1.0 if r.lower() in text else 0.0 for r in references]


def check_pairs(name: str, predictions: Sequence[str], references: Sequence[Sequence[str]]) -> None:
    """One list of reference strings per prediction, none of them empty."""
    if not predictions:
        raise ValueError(f"{name}: no predictions to score")
    if len(predictions) != len(references):
        raise ValueError(f"{name}: {len(predictions)} predictions but {len(references)} lists of references; "
                         "give one list per prediction")
    for i, refs in enumerate(references):
        if isinstance(refs, str):
            raise ValueError(f"{name}: the references of example {i} are one string ({refs!r}); give a list of "
                             f"strings, e.g. [{refs!r}]")
        if not refs:
            raise ValueError(f"{name}: example {i} has no reference strings; give at least one")
