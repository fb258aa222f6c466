"""The content study's runs: one per (encoding, seed), plus the strength sweep's extra runs.

A sweep strength whose patch is the same as one of the study's encodings reuses that encoding's runs
(strength 0 is its base encoding exactly, docs/spec.md, section 2.6: bit for bit, so it also trains identically).
"""

from __future__ import annotations

from pathlib import Path

from ....patching.schemes.source import SOURCES
from ...config import patch_options, patch_value
from ...runs import Run, run_folder
from .config import StudyConfig

__all__ = ["plan_runs", "sweep_label", "sweep_names"]


def sweep_label(strength: float) -> str:
    return f"sweep_strength_{strength:g}"


def _canonical(opts: dict | None):
    """A comparable form of a patch; positions from a source (trajectory) at strength 0 and no extension are its
    base encoding's, so such a patch becomes its base without the source's own options."""
    if opts is None:
        return ("native",)
    opts = dict(opts)
    source = SOURCES.get(opts.get("encoding"))
    if source is not None and opts.get("strength", 0.2) == 0 and opts.get("base") and not opts.get("extend"):
        own = {o.name for o in source.options}
        opts = {k: v for k, v in opts.items() if k not in own} | {"encoding": opts["base"]}
    cfg = patch_value(opts).to_dict()
    return tuple(sorted((k, str(v)) for k, v in cfg.items()))


def sweep_names(cfg: StudyConfig) -> dict[float, str]:
    """``{strength: model name}``: an existing encoding's name when the patch is the same."""
    if cfg.sweep is None:
        return {}
    known = {_canonical(patch_options(o)): name for name, o in cfg.encodings.items()}
    out = {}
    for s in cfg.sweep.strengths:
        opts = {**cfg.sweep.encoding, "strength": s}
        out[s] = known.get(_canonical(opts), sweep_label(s))
    return out


def plan_runs(cfg: StudyConfig) -> list[Run]:
    root = Path(cfg.output_dir) / "models"
    runs = [Run(name, seed, patch_options(opts), run_folder(root, name, seed))
            for name, opts in cfg.encodings.items() for seed in cfg.seeds]
    if cfg.sweep is not None:
        seeds = cfg.sweep.seeds or cfg.seeds
        for s, name in sweep_names(cfg).items():
            if name in cfg.encodings:
                missing = [seed for seed in seeds if seed not in cfg.seeds]
                runs += [Run(name, seed, patch_options(cfg.encodings[name]), run_folder(root, name, seed))
                         for seed in missing]
                continue
            opts = {**cfg.sweep.encoding, "strength": s}
            runs += [Run(name, seed, opts, run_folder(root, name, seed)) for seed in seeds]
    return runs
