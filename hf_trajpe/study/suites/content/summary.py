"""The study's first screen: what a researcher reads before anything else, at the training length.

1. Trajectory against its own base encoding, the one comparison the seed design's claims are about:
   deltas with significance and equivalence marks, and per pair a sentence of counts (better, worse,
   equivalent within the margin, claim ruled out).
2. The config's other pairs (``comparisons``: trajectory against CoPE, CoPE against RoPE) and the other
   encodings against the baseline table: significance and equivalence only, no claims.
3. The random-content control in plain words (:func:`~hf_trajpe.study.control.diagnose_control`).

It opens ``study.md`` and ``report.md`` and is the last thing ``hf-trajpe study`` prints.
"""

from __future__ import annotations

from ....evaluation.claims import CLAIMED_IMPROVEMENT, CONTROL_TYPE
from ....evaluation.report import cell, legend
from ....evaluation.verdicts import BETTER, WORSE
from ...plan import plan_lines

__all__ = ["pair_sentence", "summary_lines"]


def _counts(per_type: dict, types: list[str]) -> dict[str, int]:
    ds = [per_type[t] for t in types if per_type.get(t)]
    return {"n": len(ds), "better": sum(d["significance"] == BETTER for d in ds),
            "worse": sum(d["significance"] == WORSE for d in ds),
            "equivalent": sum(bool(d.get("equivalent")) for d in ds)}


def pair_sentence(name: str, ref: str, per_type: dict, types: list[str], margin: float, claims: bool) -> str:
    """``per_type``: ``{type: delta}`` at one length. Counts over the structured types (not the control)."""
    structured = [t for t in types if t != CONTROL_TYPE]
    c = _counts(per_type, structured)
    n = c["n"]
    none = n - c["better"] - c["worse"]
    text = (f"`{name}` vs `{ref}`: better on {c['better']}, worse on {c['worse']}, no significant difference on "
            f"{none} of {n} types; equivalent within ±{margin:g}% on {c['equivalent']} of {n}")
    if claims:
        ds = [(t, per_type[t]) for t in structured if per_type.get(t) and t in CLAIMED_IMPROVEMENT]
        out = sum(d["ci"][1] < CLAIMED_IMPROVEMENT[t][0] for t, d in ds)
        within = sum(d.get("claim_verdict") in ("within the claim", "above the claim") for _, d in ds)
        text += (f"; claimed improvement ruled out on {out} of {len(ds)} (95% interval below the claimed range), "
                 f"reached on {within}")
    return text + "."


def _at(per_type: dict, length: int) -> dict:
    return {t: d.get(length) for t, d in per_type.items()}


def _table(columns: dict[str, dict], types: list[str], length: int, claims: bool) -> list[str]:
    head = "| type | " + ("claimed | " if claims else "") + " | ".join(columns) + " |"
    lines = [head, "|---|" + ("---|" if claims else "") + "---:|" * len(columns)]
    for t in types:
        claim = CLAIMED_IMPROVEMENT.get(t) if t != CONTROL_TYPE else None
        label = f"{t} (control)" if t == CONTROL_TYPE else t
        lines.append(f"| {label} | " + ((f"{claim[0]:g}-{claim[1]:g}% | " if claim else "- | ") if claims else "")
                     + " | ".join(cell(per_t.get(t, {}).get(length)) for per_t in columns.values()) + " |")
    return lines + [""]


def summary_lines(cfg, types: list[str], lengths: list[int], effect: dict, main_deltas: dict,
                  control: dict, pairs: dict | None = None, family: int | None = None) -> list[str]:
    """The first screen (Markdown lines): ``effect`` ``{trajectory: {"base", "deltas"}}``, ``main_deltas``
    ``{encoding: {type: {length: delta}}}`` against ``cfg.baseline``, ``control`` the diagnosis, ``pairs``
    the config's ``comparisons`` (``{label: {"model", "reference", "deltas"}}``); ``family``: the number of
    comparisons the verdicts were adjusted across (the config's declared correction, printed with the plan)."""
    L0, margin = lengths[0], cfg.equivalence_margin
    t = cfg.train
    seeds = len(cfg.seeds)
    lines = [f"## Summary at the training length ({L0} tokens)", "",
             f"{seeds} seed(s), {t.steps} training steps of a {cfg.model.get('n_layer', '?')}-layer, "
             f"{cfg.model.get('n_embd', '?')}-wide {cfg.model.get('model_type')}; intervals over test sequences"
             + (" and seeds" if seeds > 1 else " only (one seed: seed-to-seed spread is not in them)")
             + ". Cells: delta of perplexity in percent, positive = better than the reference [95% interval]. "
             + legend(margin, "%", family, cfg.correction), "",
             *plan_lines(cfg.seeds, margin, "%", cfg.correction, cfg.analysis, family)]
    if control.get("status") in ("failed", "broken"):
        lines += [control["finding"], ""]
    if effect:
        lines += ["**Trajectory against its own base encoding** (the comparison the seed design's claims are "
                  "about):", ""]
        lines += _table({f"`{k}` vs `{v['base']}`": v["deltas"] for k, v in effect.items()}, types, L0, claims=True)
        lines += [f"- {pair_sentence(k, v['base'], _at(v['deltas'], L0), types, margin, True)}"
                  for k, v in effect.items()] + [""]
    if pairs:
        lines += ["**Other pairs** (significance and equivalence only):", ""]
        lines += _table({f"`{v['model']}` vs `{v['reference']}`": v["deltas"] for v in pairs.values()}, types, L0,
                        claims=False)
        lines += [f"- {pair_sentence(v['model'], v['reference'], _at(v['deltas'], L0), types, margin, False)}"
                  for v in pairs.values()] + [""]
    others = {n: d for n, d in main_deltas.items() if n not in cfg.trajectory_pairs}
    if others:
        lines += [f"**Encodings against `{cfg.baseline}`** (significance only: the claims are not about these):", ""]
        lines += _table({f"`{n}`": d for n, d in others.items()}, types, L0, claims=False)
        lines += [f"- {pair_sentence(n, cfg.baseline, _at(d, L0), types, margin, False)}"
                  for n, d in others.items()] + [""]
    if control.get("finding") and control.get("status") not in ("failed", "broken"):
        lines += [f"**Random-content control:** {control['finding']}", ""]
    return lines
