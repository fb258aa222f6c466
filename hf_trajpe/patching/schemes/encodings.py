"""What an encoding name stands for, and which options a patch of it takes.

An encoding is ``native`` (the model's own scheme), a selectable scheme, or a position source on a base
scheme (``trajectory``). Its options are those its declarers declare: the scheme's; the source's and its
base's; for ``native`` and a source on the model's own scheme (``base=None``), the options of the scheme the
model turns out to have, which are checked alone when the patch is built and against the model when it is
applied (:func:`refuse_undeclared`). Any other option is refused, whatever its value, naming the
encodings that take it.
"""

from __future__ import annotations

from .option import Option
from .scheme import SCHEMES, Scheme
from .source import SOURCES

__all__ = ["NATIVE", "encoding_names", "trajectory_base_names", "declarers_for", "check_options", "own_options",
           "takers", "describe", "refusal", "refuse_undeclared", "options_table", "declared_options", "declarers"]

#: the encoding that keeps the model's own scheme
NATIVE = "native"


def encoding_names() -> tuple[str, ...]:
    """What ``hf_trajpe.patch`` accepts as ``encoding``: the model's own, each selectable scheme, each source."""
    return (NATIVE, *(n for n, c in SCHEMES.items() if c.selectable), *SOURCES)


def trajectory_base_names() -> tuple[str, ...]:
    """Schemes that read fractional positions, hence can carry trajectory positions."""
    return tuple(n for n, c in SCHEMES.items() if c.fractional)


def declared_options() -> dict[str, Option]:
    """Option name -> its declaration, over the registered schemes and position sources (registration order)."""
    out: dict[str, Option] = {}
    for owner in (*SCHEMES.values(), *SOURCES.values()):
        for option in owner.options:
            out.setdefault(option.name, option)
    return out


def declarers(name: str) -> list[str]:
    """The schemes and position sources that declare option ``name``, in registration order."""
    return [n for n, owner in (*SCHEMES.items(), *SOURCES.items()) if any(o.name == name for o in owner.options)]


def _model_schemes() -> tuple[type[Scheme], ...]:
    return tuple(c for c in SCHEMES.values() if c.model_own)


def declarers_for(encoding: str, base: str | None) -> tuple[tuple, tuple[type[Scheme], ...]]:
    """``(declarers, candidates)`` of a patch: the declarers whose options are all in force (filled with their
    defaults), and the schemes one of which the model decides (``native``, a source with ``base=None``): of
    those only the options given are kept, checked once the model is known."""
    source = SOURCES.get(encoding)
    if source is not None:
        return ((source,), _model_schemes()) if base is None else ((source, SCHEMES[base]), ())
    if encoding == NATIVE:
        return (), _model_schemes()
    return (SCHEMES[encoding],), ()


def base_of(encoding: str, values: dict) -> str | None:
    """The base scheme named by the options of a position source; ``None`` otherwise (or the model's own)."""
    source = SOURCES.get(encoding)
    return values.get(source.base_option) if source is not None else None


def own_options(encoding: str, base: str | None) -> tuple[str, ...]:
    """The option names a patch of ``encoding`` takes whatever the model (its declarers' options)."""
    declarers, _ = declarers_for(encoding, base)
    return tuple(dict.fromkeys(o.name for d in declarers for o in d.options))


def check_options(encoding: str, given: dict) -> dict:
    """The option values of a patch of ``encoding`` from ``given`` (names of :func:`declared_options`): each
    declarer's options checked and filled in, then its checks across options; the options the model decides
    checked as given. Raises ``ValueError`` for an option the encoding does not take."""
    source = SOURCES.get(encoding)
    base = None
    if source is not None:
        base = declared_options()[source.base_option].check(given.get(source.base_option))
    declarers, candidates = declarers_for(encoding, base)
    accepted = {o.name for d in (*declarers, *candidates) for o in d.options}
    refused = [k for k in given if k not in accepted]
    if refused:
        raise ValueError(refusal(refused, describe(encoding, base)))
    values: dict = {}
    for declarer in declarers:
        mine = {o.name: o.check(given.get(o.name, o.default)) for o in declarer.options}
        values.update(declarer.check_values(mine))
    for scheme in candidates:
        if any(o.name in given for o in scheme.options):
            mine = scheme.check_values({o.name: o.check(given.get(o.name, o.default)) for o in scheme.options})
            values.update({k: v for k, v in mine.items() if k in given})
    return values


def describe(encoding: str, base: str | None = None) -> str:
    """The patch asked for, as refusals name it: ``'rope'``, ``'trajectory' on 'sinusoidal'``."""
    return f"{encoding!r}" + (f" on {base!r}" if base else "")


def _join(parts: list[str]) -> str:
    if len(parts) < 3:
        return " or ".join(parts)
    return f"{', '.join(parts[:-1])}, or {parts[-1]}"


def takers(name: str) -> str:
    """The encodings that take option ``name``, in words: ``encoding='sinusoidal' or trajectory with
    base='sinusoidal'``."""
    parts: list[str] = []
    for owner in declarers(name):
        if owner in SOURCES:
            parts.append(f"encoding={owner!r}")
            continue
        scheme = SCHEMES[owner]
        if scheme.selectable:
            parts.append(f"encoding={owner!r}")
        if scheme.model_own:
            parts.append(f"'native' on a model whose own scheme is {owner}")
        parts += [f"{s} with base={owner!r}" for s, cls in SOURCES.items() if owner in cls.bases()]
    return _join(list(dict.fromkeys(parts)))


def refusal(names: list[str], desc: str) -> str:
    """Why options ``names`` are refused for the patch ``desc``: each option's own wording where it declares
    one, else ``option(s) ... apply only to <the encodings that take them>, not <desc>``."""
    options = declared_options()
    grouped: dict[str, list[str]] = {}
    own: list[str] = []
    for name in names:
        option = options[name]
        if option.refusal:
            own.append(option.refusal.format(name=name, takers=takers(name), desc=desc))
        else:
            grouped.setdefault(takers(name), []).append(name)
    common = [f"option(s) {', '.join(ns)} apply only to {t}, not {desc}" for t, ns in grouped.items()]
    return "; ".join(common + own)


def refuse_undeclared(names, scheme: str, desc: str) -> None:
    """Refuse the options ``names`` (given for the model's own scheme) that ``scheme``, the one the model has,
    does not declare."""
    declared = {o.name for o in SCHEMES[scheme].options}
    refused = [n for n in names if n not in declared]
    if refused:
        raise ValueError(refusal(refused, desc))



def options_table() -> str:
    """The options every registered scheme and source declares, as the Markdown table of docs/patching.md
    ("Options per scheme"; a test keeps the two the same)."""
    where = {"scheme_options": "`scheme_options`", "top": "top level", "top_if_set": "top level, when set",
             "scheme_options_if_set": "`scheme_options`, when set", "no": "not saved"}
    rows = ["| option | declared by (taken by) | values | default | saved | what it does |",
            "|---|---|---|---|---|---|"]
    for name, option in declared_options().items():
        cells = (f"`{name}`", f"{', '.join(declarers(name))} ({takers(name)})", option.type, f"`{option.default!r}`",
                 where[option.saved], option.help)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)
