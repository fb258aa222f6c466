"""A heuristic detector of SPEC section 3's content types, for ``strength="auto"``.

Rules, tried in this order on the text of one sequence (first match wins):

1. ``random_content``: over 20% of characters are control, replacement or other non-printable
   characters (random bytes decoded as text).
2. ``code_hierarchy``: >= 2 lines of code syntax (``def``/``class``/``import``/``return``/``if``
   ... with ``:``, or a line of only brackets), or brackets make up >= 6% of characters.
3. ``dialogue_structure``: >= 2 lines start with a short ``Speaker:`` tag and >= 2 speakers
   alternate.
4. ``random_content`` again: a symbol soup (over 20% of characters neither letters, digits nor
   whitespace), a long text zlib cannot compress (ratio >= 0.85 over >= 200 bytes), or >= 30
   words with no word repeated (natural text repeats its function words).
5. ``circular_patterns``: the word sequence repeats itself at some lag (>= 60% of words equal the
   word that many places earlier, for a lag up to half the length).
6. ``linear_progression``: >= 3 numbers, and >= 60% of consecutive differences equal the most
   common one.
7. ``divergent_expansion``: >= 3 outline lines (bullets, ``1.2.`` numbering, tree glyphs) at >= 2
   depths.
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
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_CONVERGE = re.compile(r"\b(total|sum|sums|therefore|hence|thus|combined|altogether|in all|overall|"
                       r"conclusion|adds? up|aggregate)\b", re.IGNORECASE)


def _is_binary_noise(text: str) -> bool:
    odd = sum(not ch.isprintable() and ch not in "\n\t\r" or ch == "\ufffd" for ch in text)
    return odd > 0.2 * len(text)


def _is_random(text: str, words: list[str]) -> bool:
    symbols = sum(not (ch.isalnum() or ch.isspace()) for ch in text)
    if symbols > 0.2 * len(text):
        return True
    raw = text.encode("utf-8", "replace")
    if len(raw) >= 200 and len(zlib.compress(raw, 9)) / len(raw) >= 0.85:
        return True
    return len(words) >= 30 and len(set(w.lower() for w in words)) == len(words)


def _is_code(lines: list[str], text: str) -> bool:
    if sum(bool(_CODE_LINE.match(line)) for line in lines) >= 2:
        return True
    brackets = sum(text.count(c) for c in "{}[]()")
    return len(text) >= 20 and brackets >= 0.06 * len(text)


def _is_dialogue(lines: list[str]) -> bool:
    speakers = [m.group(1) for line in lines if (m := _SPEAKER.match(line))]
    if len(speakers) < 2 or len(set(speakers)) < 2:
        return False
    changes = sum(a != b for a, b in zip(speakers, speakers[1:], strict=False))
    return changes >= max(1, (len(speakers) - 1) // 2)


def _is_circular(words: list[str]) -> bool:
    n = len(words)
    if n < 8:
        return False
    for lag in range(1, n // 2 + 1):
        same = sum(words[i] == words[i - lag] for i in range(lag, n))
        if same >= 0.6 * (n - lag) and n - lag >= 4:
            return True
    return False


def _is_linear(text: str) -> bool:
    nums = [float(x) for x in _NUMBER.findall(text)]
    if len(nums) < 3:
        return False
    diffs = [round(b - a, 6) for a, b in zip(nums, nums[1:], strict=False)]
    step, count = Counter(diffs).most_common(1)[0]
    return step != 0 and count >= 0.6 * len(diffs)


def _is_divergent(lines: list[str]) -> bool:
    hits = [m for line in lines if (m := _OUTLINE.match(line))]
    depths = {len(m.group(1)) + m.group(2).count(".") for m in hits}
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
    if _is_dialogue(lines):
        return "dialogue_structure"
    if _is_random(text, words):
        return "random_content"
    if _is_circular(words):
        return "circular_patterns"
    if _is_linear(text):
        return "linear_progression"
    if _is_divergent(lines):
        return "divergent_expansion"
    if _CONVERGE.search(text) or "=" in text:
        return "convergent_flow"
    return "unknown"
