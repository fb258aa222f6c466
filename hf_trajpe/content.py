"""A heuristic detector of the content types (docs/spec.md, section 3), for ``strength="auto"``.

Rules, tried in this order on the text of one sequence (first match wins):

1. ``random_content``: over 20% of characters are control, replacement or other non-printable
   characters (random bytes decoded as text), or a text of >= 200 bytes that zlib cannot compress
   (ratio >= 0.75; prose and code compress to about 0.4-0.6).
2. ``code_hierarchy``: >= 2 lines of code syntax (``def``/``class``/``import``/``return``/``if``
   ... with ``:``, or a line of only brackets), or brackets make up >= 6% of characters.
3. ``dialogue_structure``: >= 2 lines start with a short ``Speaker:`` tag and >= 2 speakers
   alternate.
4. ``random_content`` again: a symbol soup (over 15% of characters are symbols other than common
   punctuation) or >= 30 words with none repeated (natural text repeats its function words).
5. ``circular_patterns``: the word sequence repeats itself at some lag (>= 60% of words equal the
   word that many places earlier), or >= 25% of >= 4 lines repeat an earlier line.
6. ``linear_progression``: numbers advance by a steady step: in the whole text, or in one column
   (the k-th number of each line, from the start or the end) across >= 3 lines; steady means >= 60%
   of consecutive differences equal the most common, non-zero one.
7. ``divergent_expansion``: >= 3 outline lines (bullets, ``1.2.`` numbering, tree glyphs) at >= 2
   depths, or >= 3 lines expanding a parent into children (``parent -> a, b``).
8. ``convergent_flow``: aggregation words (total, sum, therefore, hence, combined, ...) or ``=``.

Anything else is ``"unknown"``. The accuracy of these rules is measured against the content-type
datasets (hf_trajpe.data), not assumed.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter

__all__ = ["CONTENT_TYPES", "detect_content_type"]

CONTENT_TYPES: tuple[str, ...] = (
    "linear_progression",
    "convergent_flow",
    "circular_patterns",
    "divergent_expansion",
    "dialogue_structure",
    "code_hierarchy",
    "random_content",
)

_CODE_LINE = re.compile(
    r"^\s*(def |class |import |from \S+ import|return\b|if .*:|for .*:|while .*:|elif |else:|try:|"
    r"except|with .*:|[{}\[\]],?\s*$|\"[^\"]+\"\s*:)"
)
_SPEAKER = re.compile(r"^\s*([A-Z][\w .'-]{0,24}):\s")
_OUTLINE = re.compile(r"^(\s*)([-*+\u2022]|\d+(\.\d+)*[.)]|[\u251c\u2514\u2502]\S*)\s")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")
_EXPANDS = re.compile(r"^\s*[^\n]{1,60}?(->|=>|\u2192)\s*\S")
_TREE_GLYPHS = " \t-*+\u2022\u2500\u2502\u251c\u2514"
_PUNCTUATION = set(".,;:'\"-!?()")
_CONVERGE = re.compile(r"\b(total|sum|sums|therefore|hence|thus|combined|altogether|in all|overall|"
                       r"conclusion|adds? up|aggregate)\b", re.IGNORECASE)


def _is_binary_noise(text: str) -> bool:
    odd = sum(not ch.isprintable() and ch not in "\n\t\r" or ch == "\ufffd" for ch in text)
    if odd > 0.2 * len(text):
        return True
    raw = text.encode("utf-8", "replace")
    return len(raw) >= 200 and len(zlib.compress(raw, 9)) / len(raw) >= 0.75


def _is_random(text: str, words: list[str]) -> bool:
    symbols = sum(not (ch.isalnum() or ch.isspace() or ch in _PUNCTUATION or "\u2500" <= ch <= "\u257f")
                  for ch in text)
    if symbols > 0.15 * len(text):
        return True
    alpha = [w.lower() for w in words if w.isalpha()]
    return len(alpha) >= 30 and len(set(alpha)) == len(alpha)


def _is_code(lines: list[str], text: str) -> bool:
    if sum(bool(_CODE_LINE.match(line)) for line in lines) >= 2:
        return True
    brackets = sum(text.count(c) for c in "{}[]()")
    return len(text) >= 20 and brackets >= 0.06 * len(text)


def _speaker_tags(lines: list[str]) -> list[str]:
    return [m.group(1) for line in lines if (m := _SPEAKER.match(line)) and not any(c.isdigit() for c in m.group(1))]


def _periodic(seq: list[str], min_lag: int, share: float) -> bool:
    n = len(seq)
    for lag in range(min_lag, n // 2 + 1):
        same = sum(seq[i] == seq[i - lag] for i in range(lag, n))
        if n - lag >= 4 and same >= share * (n - lag):
            return True
    return False


def _is_dialogue(tags: list[str]) -> bool:
    """Two or more speakers who each speak more than once and take turns."""
    if len(tags) < 2 or not 2 <= len(set(tags)) <= max(2, len(tags) // 2):
        return False
    changes = sum(a != b for a, b in zip(tags, tags[1:], strict=False))
    return changes >= max(1, (len(tags) - 1) // 2)


def _is_circular(words: list[str], lines: list[str], tags: list[str]) -> bool:
    body = [line.strip() for line in lines if line.strip()]
    if len(body) >= 4:
        seen: set[str] = set()
        repeats = 0
        for line in body:
            repeats += line in seen
            seen.add(line)
        if repeats >= 0.25 * len(body):
            return True
    # line tags cycling through >= 3 values (months, weekdays), unlike two speakers taking turns
    if len(set(tags)) >= 3 and _periodic(tags, 3, 0.8):
        return True
    return len(words) >= 8 and _periodic(words, 1, 0.6)


def _steady(nums: list[float]) -> bool:
    if len(nums) < 3:
        return False
    diffs = [round(b - a, 6) for a, b in zip(nums, nums[1:], strict=False)]
    step, count = Counter(diffs).most_common(1)[0]
    return step != 0 and count >= 0.6 * len(diffs)


def _is_linear(text: str, lines: list[str]) -> bool:
    if _steady([float(x) for x in _NUMBER.findall(text)]):
        return True
    per_line = [[float(x) for x in _NUMBER.findall(line)] for line in lines]
    per_line = [nums for nums in per_line if nums]
    if len(per_line) < 3:
        return False
    width = min(len(nums) for nums in per_line)
    return any(_steady([nums[k] for nums in per_line]) or _steady([nums[-1 - k] for nums in per_line])
               for k in range(width))


def _is_divergent(lines: list[str]) -> bool:
    if sum(bool(_EXPANDS.match(line)) for line in lines) >= 3:
        return True
    hits = [(line, m) for line in lines if (m := _OUTLINE.match(line))]
    # depth: where the content starts (indent and tree glyphs) plus the levels of "1.2.3" numbering
    depths = {len(line) - len(line.lstrip(_TREE_GLYPHS)) + m.group(2).count(".") for line, m in hits}
    return len(hits) >= 3 and len(depths) >= 2


def detect_content_type(text: str) -> str:
    """One of :data:`CONTENT_TYPES`, or ``"unknown"``."""
    if not text.strip():
        return "unknown"
    lines, words = text.splitlines(), text.split()
    if _is_binary_noise(text):
        return "random_content"
    if _is_code(lines, text):
        return "code_hierarchy"
    tags = _speaker_tags(lines)
    if _is_circular([], lines, tags):  # repeated lines or cycling tags: before dialogue, which also has tags
        return "circular_patterns"
    if _is_dialogue(tags):
        return "dialogue_structure"
    if _is_random(text, words):
        return "random_content"
    if _is_circular(words, [], []):
        return "circular_patterns"
    if _is_linear(text, lines):
        return "linear_progression"
    if _is_divergent(lines):
        return "divergent_expansion"
    if _CONVERGE.search(text) or "=" in text:
        return "convergent_flow"
    return "unknown"
