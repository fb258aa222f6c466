"""The analysis plan a study config declares: checked when loaded, printed by every report, and the published
studies' configs declare theirs (with the changes made after a first look)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hf_trajpe.study.loading import load_study_config
from hf_trajpe.study.plan import AnalysisPlan, plan_lines
from hf_trajpe.training.config import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "study"


def test_the_plan_in_words_names_seeds_margin_correction_family_and_changes():
    plan = AnalysisPlan(family="every delta", changes=[{"what": "Holm became BH", "earlier": "nothing called"}])
    text = "\n".join(plan_lines([0, 1, 2], 2.0, " points", "bh", plan, 140))
    assert "3 seed(s) [0, 1, 2]" in text and "±2 points" in text
    assert "Benjamini-Hochberg's correction across the family (140 comparisons): every delta" in text
    assert "Holm's calls shown beside" in text and "- Holm became BH (earlier: nothing called)" in text
    assert "none." in "\n".join(plan_lines([0], 5.0, "%", "holm", AnalysisPlan()))


@pytest.mark.parametrize(("override", "message"), [
    ("correction=bonferroni", "correction must be one of"),
    ("analysis.changes=[{what: x}]", "analysis.changes: each entry is"),
])
def test_a_wrong_plan_is_refused_when_the_config_is_loaded(override, message):
    with pytest.raises(ConfigError, match=message):
        load_study_config(CONFIGS / "tasks.yaml", overrides=[override])


@pytest.mark.parametrize(("name", "correction"), [("default.yaml", "holm"), ("tasks.yaml", "holm"),
                                                  ("extension.yaml", "bh")])
def test_the_published_studies_declare_their_plan_and_its_changes(name, correction):
    cfg = load_study_config(CONFIGS / name)
    assert cfg.correction == correction and cfg.analysis.family and cfg.analysis.changes
    assert load_study_config(CONFIGS / name, quick=True).analysis.changes == []  # a quick run is not the study
    if name == "extension.yaml":
        assert any("Holm" in c["what"] and "Benjamini-Hochberg" in c["what"] for c in cfg.analysis.changes)
