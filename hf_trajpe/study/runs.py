"""One study run (an encoding, a seed, its folder), whatever the suite: whether it is trained already,
and the folders the study may write.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..paths import inside

__all__ = ["SUMMARY", "Run", "check_run_folder", "run_folder", "same_patch"]

SUMMARY = "train_summary.json"

@dataclass(frozen=True)
class Run:
    name: str  # the model's name in the reports
    seed: int
    options: dict | None  # hf_trajpe.patch options; None: the stock model
    folder: Path
    rows: Path | None = None  # its own training rows, where a suite draws data per seed (else the part's)
    steps: int | None = None  # its own step budget, where a suite trains several (else the config's train.steps)

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
    resolved to a number when patching, so any number matches them; ``rope_parameters`` were completed from
    the model's config, so the saved dict matches when it holds every key given, with the same value; a scheme
    option added after the save counts at its default, the behaviour the model was trained with)."""
    from ..patching import PatchConfig
    from .config import patch_value

    if saved is None or options is None:
        return saved is None and options is None
    # flat options as hf_trajpe.patch takes them (a scheme's own, e.g. cope's npos_max, beside the common ones)
    want = patch_value(options).to_dict()
    try:  # with the defaults of options added since it was saved (cope's position_logit_scale): what it trained with
        saved = {**saved, **{k: v for k, v in PatchConfig.from_dict(saved).to_dict().items() if k == "scheme_options"}}
    except (TypeError, ValueError):
        pass  # a saved patch this install cannot read: compared as it is, so it is retrained
    if want.get("sinusoid_scale") == "embeddings":
        want["sinusoid_scale"] = saved.get("sinusoid_scale")
    wanted, resolved = want.get("rope_parameters"), saved.get("rope_parameters")
    if isinstance(wanted, dict) and isinstance(resolved, dict) and all(
            resolved.get(k) == v for k, v in wanted.items()):
        want["rope_parameters"] = resolved  # patching filled in what the model's config gives (rope_theta, ...)
    drop = ("version",)
    return {k: v for k, v in want.items() if k not in drop} == {k: v for k, v in saved.items() if k not in drop}


def run_folder(root: Path, name: str, seed: int) -> Path:
    """``root/<name>_s<seed>``, refused if it leaves ``root`` (names are checked with the config already)."""
    inside(root, f"{name}_s{seed}", f"encodings.{name}")
    return root / f"{name}_s{seed}"
