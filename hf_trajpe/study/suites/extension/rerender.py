"""A published extension study's reports written again from its ``study.json`` (every seed's per-sequence
losses are kept there) and ``real/long_context.json``, with the current statistics and the plan its YAML
declares (``correction`` and ``analysis``; everything else comes from the JSON). No model is read again.
The losses are stored to 6 decimals, so p-values can move in their last digits; a verdict that changes is
returned for the report of what changed."""

from __future__ import annotations

import json
from pathlib import Path

from ....training.typed_config import from_dict
from .config import ExtensionStudyConfig
from .report import write_extension_report

__all__ = ["rerender_extension_report"]


def _verdicts(comparisons: dict) -> dict:
    return {(part, c["model"], c["reference"], c["factor"]): c["verdict"]
            for part, cs in comparisons.items() for c in cs}


def rerender_extension_report(report_dir: str | Path, config: str | Path) -> list[str]:
    """Write ``report_dir/study.md``, ``study.json`` and ``real/`` again; returns the verdicts that changed."""
    from ...loading import load_study_config

    out = Path(report_dir)
    data = json.loads((out / "study.json").read_text())
    plan = load_study_config(config)
    saved = {**data["config"], "correction": plan.correction, "analysis": plan.to_dict()["analysis"],
             "report_dir": str(out)}
    cfg = from_dict(ExtensionStudyConfig, saved).validate()
    cpu = data.get("eval_cpu_seconds", {})
    results = {part: {"scores": scores, "eval_cpu_seconds": cpu.get(part, 0.0)}
               for part, scores in data["scores"].items()}
    real = out / "real" / "long_context.json"
    if real.exists():
        results["real"] = json.loads(real.read_text())
    before = _verdicts(data["comparisons"])
    write_extension_report(cfg, results, data["summaries"], data["timing"], data["versions"], data["command"])
    after = _verdicts(json.loads((out / "study.json").read_text())["comparisons"])
    return [f"{k[0]}, {k[1]} vs {k[2]} at {float(k[3]):g}x: {before.get(k)} -> {v}"
            for k, v in after.items() if before.get(k) != v]
