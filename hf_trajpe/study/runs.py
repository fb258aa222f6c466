"""What the study trains: one run per (encoding, seed), plus the strength sweep's extra runs.

A sweep strength whose patch is the same as one of the study's encodings reuses that encoding's runs
(strength 0 is its base encoding exactly, docs/spec.md, section 2.6: bit for bit, so it also trains identically).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..paths import inside
from .config import StudyConfig, patch_options

__all__ = ["Run", "check_run_folder", "run_folder", "plan_runs", "same_patch", "sweep_names", "sweep_label"]

SUMMARY = "train_summary.json"

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
        path = self.folder / SUMMARY
        if not path.is_file():
            return False
        return same_patch(json.loads(path.read_text()).get("patch"), self.options)


def check_run_folder(run: Run) -> None:
    """Refuse a run whose folder holds something this study did not train (no ``train_summary.json``): the
    trained model replaces the folder, and a folder the study did not write is never deleted."""
    folder = Path(run.folder)
    if folder.is_symlink() or (folder.exists() and not (folder / SUMMARY).is_file()):
        raise FileExistsError(
            f"{folder} exists but is not a model this study trained (it has no {SUMMARY}), and {run.name} seed "
            f"{run.seed} would replace it; move it away, or set output_dir to another folder"
        )


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


def run_folder(root: Path, name: str, seed: int) -> Path:
    """``root/<name>_s<seed>``, refused if it leaves ``root`` (names are checked with the config already)."""
    inside(root, f"{name}_s{seed}", f"encodings.{name}")
    return root / f"{name}_s{seed}"


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
