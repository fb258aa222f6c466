"""What the study trains: one run per (encoding, seed), plus the strength sweep's extra runs.

A sweep strength whose patch is the same as one of the study's encodings reuses that encoding's runs
(strength 0 is its base encoding exactly, docs/spec.md, section 2.6: bit for bit, so it also trains identically).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .config import StudyConfig, patch_options

__all__ = ["Run", "plan_runs", "same_patch", "sweep_names", "sweep_label"]

_TRAJECTORY_ONLY = ("base", "strength", "learnable_strength", "beta", "interpolation", "detach", "cache",
                    "cache_size")


@dataclass(frozen=True)
class Run:
    name: str  # the model's name in the reports
    seed: int
    options: dict | None  # hf_trajpe.patch options; None: the stock model
    folder: Path

    @property
    def done(self) -> bool:
        """Trained and saved with the patch this run asks for (a changed encoding entry retrains)."""
        path = self.folder / "train_summary.json"
        if not path.is_file():
            return False
        return same_patch(json.loads(path.read_text()).get("patch"), self.options)


def same_patch(saved: dict | None, options: dict | None) -> bool:
    """Whether a saved ``PatchConfig`` dict is what ``options`` ask for (``"embeddings"`` scales were
    resolved to a number when patching, so any number matches them)."""
    from ..patching import PatchConfig

    if saved is None or options is None:
        return saved is None and options is None
    # flat options as hf_trajpe.patch takes them (a scheme's own, e.g. cope's npos_max, beside the common ones)
    want = (PatchConfig.from_options(**options) if hasattr(PatchConfig, "from_options")
            else PatchConfig(**options)).to_dict()
    if want.get("sinusoid_scale") == "embeddings":
        want["sinusoid_scale"] = saved.get("sinusoid_scale")
    drop = ("version",)
    return {k: v for k, v in want.items() if k not in drop} == {k: v for k, v in saved.items() if k not in drop}


def sweep_label(strength: float) -> str:
    return f"sweep_strength_{strength:g}"


def _canonical(opts: dict | None):
    """A comparable form of a patch; trajectory at strength 0 becomes its base encoding."""
    from ..patching import PatchConfig

    if opts is None:
        return ("native",)
    opts = dict(opts)
    if opts.get("encoding") == "trajectory" and opts.get("strength", 0.2) == 0 and opts.get("base"):
        opts = {k: v for k, v in opts.items() if k not in _TRAJECTORY_ONLY} | {"encoding": opts["base"]}
    cfg = PatchConfig.from_options(**opts).to_dict()
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
    runs = [Run(name, seed, patch_options(opts), root / f"{name}_s{seed}")
            for name, opts in cfg.encodings.items() for seed in cfg.seeds]
    if cfg.sweep is not None:
        seeds = cfg.sweep.seeds or cfg.seeds
        for s, name in sweep_names(cfg).items():
            if name in cfg.encodings:
                missing = [seed for seed in seeds if seed not in cfg.seeds]
                runs += [Run(name, seed, patch_options(cfg.encodings[name]), root / f"{name}_s{seed}")
                         for seed in missing]
                continue
            opts = {**cfg.sweep.encoding, "strength": s}
            runs += [Run(name, seed, opts, root / f"{name}_s{seed}") for seed in seeds]
    return runs
