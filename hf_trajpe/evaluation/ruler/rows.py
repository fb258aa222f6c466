"""The rows file of a RULER run (``--out/ruler_rows.jsonl``): JSON lines, a header with what defines the run,
then one row per scored prompt, appended as soon as it is scored, so that a rerun takes the rows already there.

What defines a run is the dtype the models read in, the seed, and each method's model and patch; nothing
measured (``--dtype auto``'s calibration goes into the report, not here), so the same command always resumes.
A definition binds only once rows were saved under it: a file whose rows were made in another dtype or seed,
or by another model or patch under a method's name, is refused rather than mixed; a method with no saved row
(a run refused before its first row) takes the new definition, with a warning. The header is written with
the first row, so a run that fails before it leaves no file behind.

A resume never writes two rows on one line and never loses a saved row: a last line cut short by an
interrupted write is dropped with a warning (its prompt is generated again); a complete last row without its
newline gets it before anything is appended; a line holding rows back to back is split into lines of their
own. Any other line that is not a row is an error naming the file and the line. Repairs rewrite the file
atomically.

A run spread over processes saves each process's rows to a part file beside the rows file (:func:`part_path`);
:meth:`RowsFile.fold` moves them into the rows file (at the start of any run, so that a run interrupted with
one number of processes continues with another, and at the end of a spread run).
"""

from __future__ import annotations

import glob
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

from ...paths import atomic_write_text
from .runner import prompt_key

__all__ = ["ROW_KEYS", "RowsFile", "part_path", "read_rows_file", "run_header"]

#: what every row holds (as :func:`~.runner.run_ruler` writes it): its prompt's key and its score
ROW_KEYS = ("method", "task", "haystack", "length", "index", "prompt_sha1", "score")
_DAMAGED = "the rows file is damaged: remove that line (its prompt is generated again) or move the file away"
_FOREIGN = "give another --out or move the file away"


def run_header(dtype: str, seed: int, methods: dict[str, dict]) -> dict:
    """What defines a run, and nothing else: the dtype read in, the seed, each method's model and patch."""
    return {"dtype": dtype, "seed": seed, "methods": methods}


def _definition(record: object) -> dict | None:
    """The run header of a header record, or ``None`` when ``record`` is none. Files written before the
    header held only the definition give the dtype inside ``precision``."""
    if not isinstance(record, dict) or not isinstance(record.get("header"), dict):
        return None
    header = record["header"]
    precision = header.get("precision")
    dtype = header.get("dtype", precision.get("dtype") if isinstance(precision, dict) else None)
    if not isinstance(dtype, str) or "seed" not in header or not isinstance(header.get("methods"), dict):
        return None
    return run_header(dtype, header["seed"], header["methods"])


def _objects(text: str) -> tuple[list, json.JSONDecodeError | None]:
    """The JSON values of one line, back to back, and the error where the rest does not parse (or ``None``)."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return values, None
        try:
            value, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError as err:
            return values, err
        values.append(value)


def _parse(path: Path) -> tuple[list[tuple[int, object]], bool]:
    """Every JSON value of the file with its line number, and whether the file must be rewritten before a
    row is appended (a last line without its newline, rows back to back). Warns of what is dropped."""
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    open_end = not raw.endswith(b"\n")  # the last line has no newline: a write was cut there
    if not open_end:
        lines.pop()
    records: list[tuple[int, object]] = []
    repair = False
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        last = open_end and number == len(lines)
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            if not last:
                raise ValueError(f"{path}, line {number}: not UTF-8 text, so not a RULER rows file; "
                                 f"{_FOREIGN if number == 1 else _DAMAGED}") from None
            values, err = [], "not UTF-8 text"
        else:
            values, err = _objects(text)
        if err is not None and not last:
            raise ValueError(f"{path}, line {number}: not JSON ({err}); "
                             f"{'not a RULER rows file: ' + _FOREIGN if number == 1 else _DAMAGED}")
        if err is not None:
            tail = line[-40:].decode("utf-8", "replace")
            warnings.warn(f"{path}, line {number}: a last line cut short by an interrupted write "
                          f"({tail!r}) is dropped; what it held is made again", RuntimeWarning, stacklevel=3)
        if len(values) > 1:
            warnings.warn(f"{path}, line {number}: {len(values)} rows on one line (appended to a row without its "
                          "newline) are put on lines of their own", RuntimeWarning, stacklevel=3)
        records += [(number, v) for v in values]
        repair = repair or last or len(values) > 1
    return records, repair


def _check_row(path: Path, number: int, row: object) -> dict:
    if not isinstance(row, dict):
        raise ValueError(f"{path}, line {number}: a JSON {type(row).__name__}, not a RULER row; {_DAMAGED}")
    missing = [k for k in ROW_KEYS if k not in row]
    if missing:
        what = "a second header" if "header" in row else f"not a RULER row (no {', '.join(missing)})"
        raise ValueError(f"{path}, line {number}: {what}; {_DAMAGED}")
    return row


def part_path(path: str | os.PathLike, rank: int) -> Path:
    """Where process ``rank`` of a run spread over processes saves its rows: beside the rows file."""
    path = Path(path)
    return path.with_name(f"{path.name}.part-{rank}")


def _part_paths(path: Path) -> list[Path]:
    """The part files beside the rows file at ``path``, by rank."""
    found = []
    for part in path.parent.glob(f"{glob.escape(path.name)}.part-*"):
        rank = part.name[len(path.name) + len(".part-"):]
        if rank.isdigit() and part.is_file():
            found.append((int(rank), part))
    return [part for _, part in sorted(found)]


class RowsFile:
    """The rows file at ``path`` for a run defined by ``header`` (:func:`run_header`): :meth:`read` the rows
    an earlier run saved, then :meth:`append` each new one."""

    def __init__(self, path: str | os.PathLike, header: dict) -> None:
        self.path, self.header = Path(path), json.loads(json.dumps(header))  # as it reads back from the file
        self._has_header = False
        #: the header in the file after :meth:`read` (this run's, with the definitions of other saved methods)
        self.defined: dict | None = None

    def read(self) -> dict[str, dict]:
        """The saved rows by :func:`~.runner.prompt_key`; none when there is no file. Refuses rows of another
        run and damaged lines (naming the file and the line); repairs a cut last line and takes this run's
        definitions of methods without saved rows, rewriting the file."""
        path = self.path
        if not path.exists():
            return {}
        records, repair = _parse(path)
        if not records:
            text = path.read_bytes().lstrip()
            if not text or text.startswith(b'{"header"'):
                return {}  # empty, or only a header cut short: nothing saved; the first row writes the header
            raise ValueError(f"{path} is not a RULER rows file (no header line); {_FOREIGN}")
        old = _definition(records[0][1])
        if old is None:
            raise ValueError(f"{path}, line {records[0][0]}: not the header of a RULER rows file; {_FOREIGN}")
        rows = [_check_row(path, number, row) for number, row in records[1:]]
        saved: dict[str, int] = {}  # method -> the line of its first row
        for (number, _), row in zip(records[1:], rows, strict=True):
            saved.setdefault(row["method"], number)
        undefined = sorted(set(saved) - set(old["methods"]))
        if undefined:
            raise ValueError(f"{path}, line {saved[undefined[0]]}: a row of method {undefined[0]}, which the header "
                             f"does not define; {_DAMAGED}")
        new = self._merge(old, set(saved))
        if repair or new != old:
            atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in [{"header": new}, *rows]))
        self._has_header, self.defined = True, new
        return {prompt_key(r["method"], r): r for r in rows}

    def fold(self, order: Sequence[str] = ()) -> dict[str, dict]:
        """:meth:`read`, with the part files of a run spread over processes (:func:`part_path`) folded in first.

        Each part is read as a rows file of this run (refused as :meth:`read` refuses, naming the part); its rows
        not yet in the rows file follow the saved ones, in ``order`` (keys by :func:`~.runner.prompt_key`; rows
        whose key it lacks last, as the parts hold them). The rows file is replaced in one rename before the
        parts are removed, so a fold cut short loses nothing, and a row then in both is kept once."""
        rows = self.read()
        parts = _part_paths(self.path)
        if not parts:
            return rows
        header, new = self.defined or self.header, {}
        for part in parts:
            source = RowsFile(part, self.header)
            for key, row in source.read().items():
                if key not in rows:
                    new.setdefault(key, row)
            header = self._combine(header, source.defined, part)
        place = {key: at for at, key in enumerate(order)}
        rows.update((key, new[key]) for key in sorted(new, key=lambda k: place.get(k, len(place))))
        if rows and (new or header != self.defined):
            atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in [{"header": header}, *rows.values()]))
            self._has_header, self.defined = True, header
        for part in parts:
            part.unlink(missing_ok=True)
        return rows

    def _combine(self, header: dict, other: dict | None, part: Path) -> dict:
        """``header`` with the methods a part's rows were made by; refuses two definitions of one method."""
        if other is None:
            return header
        for method, setting in other["methods"].items():
            before = header["methods"].get(method, setting)
            if before != setting:
                raise ValueError(f"{part} holds rows of method {method} made by {setting}, {self.path} rows of it "
                                 f"made by {before}; move one of the two files away")
        return {**header, "methods": {**header["methods"], **other["methods"]}}

    def _merge(self, old: dict, saved: set[str]) -> dict:
        """The header from now on; refuses a definition that rows were saved under and this run changes."""
        path, header = self.path, self.header
        if not saved:
            if old != header:
                warnings.warn(f"{path} holds no rows yet; its header {json.dumps(old)} is replaced by this run's",
                              RuntimeWarning, stacklevel=3)
            return header
        clashes = [f"{key} {old[key]!r} -> {header[key]!r}" for key in ("dtype", "seed") if old[key] != header[key]]
        replaced = []
        for method, setting in header["methods"].items():
            before = old["methods"].get(method, setting)
            if before != setting:
                (clashes if method in saved else replaced).append(f"method {method}: {before} -> {setting}")
        if clashes:
            same = old["dtype"] == header["dtype"]
            hint = "" if same else f"; or read in the saved rows' dtype (--dtype {old['dtype']})"
            raise ValueError(f"{path} holds rows of another run ({'; '.join(clashes)}); give another --out, or move "
                             f"the file away to start afresh{hint}")
        if replaced:
            warnings.warn(f"{path}: no rows saved yet for {'; '.join(replaced)}: this run's definition is taken",
                          RuntimeWarning, stacklevel=3)
        return {**header, "methods": {**{m: d for m, d in old["methods"].items() if m in saved}, **header["methods"]}}

    def append(self, row: dict) -> None:
        """Save one row on a line of its own (the header first, when the file has none yet)."""
        if not self._has_header:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps({"header": self.header}) + "\n")
            self._has_header = True
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")


def read_rows_file(path: str | os.PathLike, header: dict) -> dict[str, dict]:
    """The rows an earlier run saved at ``path`` by key (:meth:`RowsFile.read`)."""
    return RowsFile(path, header).read()
