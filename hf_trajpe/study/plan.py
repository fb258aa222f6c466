"""A study's analysis plan, declared in its config before the data: which correction for many comparisons
decides the verdicts, which comparisons form the family, and every change made to the plan after a first
look at results (with what the earlier plan gave), so a reader can tell a plan from a choice made after
seeing the numbers.

The seeds and the equivalence margin are the config's own ``seeds`` and ``equivalence_margin``; the
correction is its ``correction`` (``holm`` or ``bh``; a report always shows the other beside it); the rest
is the ``analysis`` section (:class:`AnalysisPlan`). :func:`plan_lines` is what a report prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..evaluation.verdicts import CORRECTIONS, correction_name
from ..training.config import ConfigError

__all__ = ["AnalysisPlan", "check_correction", "plan_lines"]


@dataclass
class AnalysisPlan:
    #: the family of comparisons one correction runs across, in words
    family: str = ""
    #: changes made after a first look at results: each ``{what: ..., earlier: ...}`` (the earlier result)
    changes: list[dict] = field(default_factory=list)

    def check(self) -> None:
        for change in self.changes:
            if not isinstance(change, dict) or set(change) != {"what", "earlier"}:
                raise ConfigError("analysis.changes: each entry is {what: the change made after a first look, "
                                  f"earlier: what the earlier plan gave}}; got {change!r}")


def check_correction(correction: str) -> None:
    if correction not in CORRECTIONS:
        raise ConfigError(f"correction must be one of {sorted(CORRECTIONS)} (holm: family-wise error; bh: "
                          f"Benjamini-Hochberg's false discovery rate), got {correction!r}")


def plan_lines(seeds: list[int], margin: float, unit: str, correction: str, plan: AnalysisPlan,
               family_size: int | None = None) -> list[str]:
    """The declared plan as a markdown paragraph and list: seeds, margin, correction, family, changes."""
    other = "bh" if correction == "holm" else "holm"
    size = f" ({family_size} comparisons)" if family_size is not None else ""
    lines = ["**Analysis plan** (as the study config declares it; what was changed after a first look at results "
             "is listed below it): "
             f"{len(seeds)} seed(s) {list(seeds)}; equivalence margin ±{margin:g}{unit} (two one-sided tests); "
             f"{correction_name(correction)}'s correction across the family{size}"
             + (f": {plan.family}" if plan.family else "")
             + f"; the same correction for the differences and the equivalence tests; {correction_name(other)}'s "
             "calls shown beside.", ""]
    if plan.changes:
        lines += ["Changes made after a first look at results (with what the earlier plan gave):", ""]
        lines += [f"- {c['what']} (earlier: {c['earlier']})" for c in plan.changes]
    else:
        lines.append("Changes made after a first look at results: none.")
    return lines + [""]
