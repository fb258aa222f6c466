"""The recovery study's YAML (``configs/study/recovery.yaml``, ``suite: recovery``): how many fine-tuning steps
bring a pretrained model back after its encoding is swapped (docs/finetune.md, "Recovery after a swap").

``experiment`` is the experiment config of the recipe (``recipes/finetune.py``, run through ``accelerate
launch`` with ``accelerate`` as its config file) that every run fine-tunes with, its ``encoding``, ``name``,
``seed`` and ``output_dir`` replaced per run (and ``train.max_steps`` by ``steps`` where given). ``encodings``
are patch options as ``hf_trajpe.patch`` takes them; the entry whose encoding is ``native`` is the stock model
tuned the same way (its step 0 is the stock model's perplexity, the line to recover to). ``layers``: each
swapped encoding is run once per layer selection (``top:k``: the last k layers; ``all``: every layer, the run
of the encoding alone); ``native`` runs once. Paths are relative to the working folder, like ``output_dir``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ....training.config import ConfigError
from ...base_config import BaseStudyConfig
from ...config import check_encoding_names, patch_options, patch_value, training_encoding

__all__ = ["RecoveryEval", "RecoveryStudyConfig", "RecoveryRun", "run_name"]


@dataclass
class RecoveryEval:
    recovery: bool = True  # the recovered share of the swap's damage per content type (false: the curves only)
    extrapolation: bool = True  # hf-trajpe eval of the final models at 1x, 2x and 4x the training length
    types: list[str] | None = None  # content types of the recovered shares; None: real_text and the seven types
    chunks: int = 8  # test chunks of the training length per content type for the recovered shares
    real_sequences: int = 16  # real_text test blocks at 4x the training length (extrapolation)
    type_sequences: int = 2  # test blocks per content type at 4x the training length (extrapolation)


@dataclass(frozen=True)
class RecoveryRun:
    name: str  # the run's name and folder: the encoding, then its layer selection (none_top8)
    encoding: str  # the name of its entry in ``encodings``
    layers: str | None  # its layer selection; None: every layer


def run_name(encoding: str, layers: str | None) -> str:
    """The run's name: the encoding, then its layer selection (``none_top8``); ``all``: the encoding alone."""
    if layers in (None, "all"):
        return encoding
    return f"{encoding}_" + "".join(c if c.isalnum() else "_" if c == "," else "" for c in layers.replace("-", "to"))


@dataclass(kw_only=True)
class RecoveryStudyConfig(BaseStudyConfig):
    experiment: str = "configs/experiments/smollm2_lora_native.yaml"
    encodings: dict = field(default_factory=lambda: {"native": {"encoding": "native"}})
    layers: list[str] = field(default_factory=lambda: ["all"])
    steps: int | None = None  # train.max_steps of every run; None: the experiment config's
    #: CPU threads of each run (accelerate's --num_cpu_threads_per_process; None: accelerate's choice, all cores)
    threads: int | None = None
    seeds: list[int] = field(default_factory=lambda: [0])  # several: the gaps get intervals over seeds
    output_dir: str = "runs/study/recovery"
    report_dir: str = "outputs/study_recovery"
    workers: int = 1  # runs at once (each uses every core unless threads says otherwise)
    recipe: str = "recipes/finetune.py"
    accelerate: str = "configs/accelerate/cpu.yaml"
    eval: RecoveryEval = field(default_factory=RecoveryEval)

    ORDER: ClassVar[tuple[str, ...]] = (
        "name", "experiment", "encodings", "layers", "steps", "threads", "seeds", "output_dir", "report_dir",
        "workers", "recipe", "accelerate", "eval", "quick")
    #: what decides the fine-tuned models (a changed encoding retrains its own runs only: their saved patch differs)
    FINGERPRINT: ClassVar[tuple[str, ...]] = ("experiment_config", "steps", "seeds")

    def base_experiment(self) -> dict:
        """The experiment config every run starts from (its ``base:`` files resolved)."""
        from ....training.yaml_files import read_config_file

        return read_config_file(self.experiment)

    @property
    def log_every(self) -> int:
        return int(self.base_experiment()["train"].get("log_every", 1))

    def fingerprint_dict(self) -> dict:
        exp = self.base_experiment()
        kept = {k: v for k, v in exp.items() if k not in ("name", "output_dir", "encoding", "logging")}
        return {"experiment_config": kept, "steps": self.steps, "seeds": self.seeds}

    def native(self) -> str | None:
        """The name of the entry that is the stock model tuned the same way, if the study has one."""
        return next((n for n, o in self.encodings.items() if patch_options(o) is None), None)

    def runs(self) -> list[RecoveryRun]:
        """Every run: the native entry once, each other encoding once per layer selection."""
        out = []
        for name, opts in self.encodings.items():
            for layers in ([None] if patch_options(opts) is None else self.layers):
                layers = None if layers == "all" else layers
                out.append(RecoveryRun(run_name(name, layers), name, layers))
        return list(dict.fromkeys(out))

    def options(self, run: RecoveryRun) -> dict | None:
        """The run's ``hf_trajpe.patch`` options (None: the stock model)."""
        opts = patch_options(self.encodings[run.encoding])
        if opts is not None and run.layers is not None:
            opts["layers"] = run.layers
        return opts

    def encoding_section(self, run: RecoveryRun) -> dict:
        """The experiment config's ``encoding`` section of a run."""
        return training_encoding(self.options(run)) or {"name": "native"}

    def validate(self) -> RecoveryStudyConfig:
        from ....patching import normalize_selection

        check_encoding_names(self.encodings)
        for name, opts in self.encodings.items():
            if not isinstance(opts, dict) or "encoding" not in opts or isinstance(opts["encoding"], dict):
                raise ConfigError(f"encodings.{name}: expected a mapping with an 'encoding' name, got {opts!r}")
            try:
                patch_value(opts)
            except (TypeError, ValueError) as err:
                raise ConfigError(f"encodings.{name}: {err}") from None
        natives = [n for n, o in self.encodings.items() if patch_options(o) is None]
        if len(natives) > 1:
            raise ConfigError(f"encodings: one entry may be the stock model (encoding: native), got {natives}")
        if not self.layers:
            raise ConfigError("layers: at least one layer selection (all: every layer)")
        for sel in self.layers:
            try:
                normalize_selection(sel)
            except (TypeError, ValueError) as err:
                raise ConfigError(f"layers: {err}") from None
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds: one or more distinct seeds (one run per seed of every encoding), got "
                              f"{self.seeds}")
        for key in ("steps", "threads"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ConfigError(f"{key} must be >= 1 (or null), got {getattr(self, key)}")
        if self.workers < 1:
            raise ConfigError(f"workers must be >= 1, got {self.workers}")
        ev = self.eval
        if ev.chunks < 1 or ev.real_sequences < 1 or ev.type_sequences < 1:
            raise ConfigError("eval: chunks, real_sequences and type_sequences must be >= 1")
        for key in ("experiment", "recipe", "accelerate"):
            if not Path(getattr(self, key)).is_file():
                raise ConfigError(f"{key}: no file at {getattr(self, key)!r} (paths are relative to the working "
                                  "folder: run the study from the repository's root)")
        self._check_model()
        return self

    def _check_model(self) -> None:
        """The experiment's model must be there before anything runs (SmolLM2's GGUF is a package of its own)."""
        from ....loading import resolve_source

        model = self.base_experiment().get("model") or {}
        for key in ("path", "tokenizer"):
            if model.get(key):
                try:
                    resolve_source(model[key], f"model.{key}")
                except (FileNotFoundError, ImportError, ValueError) as err:
                    raise ConfigError(f"experiment {self.experiment}: {err}; the recovery study fine-tunes and "
                                      "scores that model, so it must be installed first") from None
