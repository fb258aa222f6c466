"""The haystacks: every content type, RULER's noise and distractor needles, and the real text on the machine."""

from __future__ import annotations

import re

import pytest

from hf_trajpe.data import byte_tokenizer
from hf_trajpe.data.registry import CONTENT_TYPE_REGISTRY
from hf_trajpe.evaluation.ruler import get_haystack, get_task, haystack_names
from hf_trajpe.evaluation.ruler.haystacks import MAX_UNIT_CHARS, NOISE, HaystackStream

REAL = ["real_code", "real_prose", "real_license", "real_man"]


def test_the_registry_holds_ruler_s_haystacks_every_content_type_and_the_real_kinds():
    names = haystack_names()
    assert names[:2] == ["noise", "needles"]
    assert set(CONTENT_TYPE_REGISTRY) <= set(names) and len(CONTENT_TYPE_REGISTRY) >= 8
    assert set(REAL) <= set(names)
    with pytest.raises(ValueError, match="unknown haystack 'essay'; known: noise, needles"):
        get_haystack("essay")


@pytest.mark.parametrize("name", haystack_names())
def test_a_needle_hides_once_in_every_haystack_at_the_length_asked(name):
    tok, task, hay = byte_tokenizer(), get_task("niah_single_1"), get_haystack(name)
    if name in REAL + ["real_text"] and not HaystackStream(hay, 0).units(1000):
        pytest.skip(f"no {name} documents on this machine")
    s = task.sample(tok, 2500, hay, 0, 0)
    assert 0.99 * 2500 <= s.tokens <= 2500 and s.haystack == name
    assert s.prompt.count(s.answers[0]) == 1
    needle = f"One of the special magic numbers for {s.extra['queries'][0]} is: {s.answers[0]}."
    context = s.prompt.split("\n", 1)[1].rsplit("\n", 1)[0].splitlines()
    assert context.count(needle) == 1, "the needle stands on a line of its own"
    own = HaystackStream(hay, s.extra["haystack_seed"]).units(len(s.prompt))
    hay_lines = [c for c in context if c != needle]
    k = len(hay_lines) - 1  # the last unit is cut to the budget
    assert hay_lines[:k] == own[:k] and own[k].startswith(hay_lines[k]), "the context is the haystack's own text"
    other = task.sample(tok, 2500, hay, 1, 0).prompt
    assert other.split("\n", 1)[1][:300] != s.prompt.split("\n", 1)[1][:300] or name == "noise", \
        "two samples read different parts of the haystack"


def test_noise_is_ruler_s_sentences_and_needles_follow_the_task_s_types():
    assert NOISE == "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
    assert set(HaystackStream(get_haystack("noise"), 0).units(1000)[:-1]) == {NOISE}
    uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    lines = HaystackStream(get_haystack("needles"), 0, ("uuids", "uuids")).units(2000)[:-1]
    assert lines and all(re.fullmatch(rf"One of the special magic uuids for {uuid} is: {uuid}\.", u) for u in lines)
    s = get_task("niah_multikey_3").sample(byte_tokenizer(), 3000, get_haystack("needles"), 0, 0)
    assert s.prompt.count("One of the special magic uuids for") > 20 and s.prompt.count(s.answers[0]) == 1


@pytest.mark.parametrize("name", ["code_hierarchy", "random_content", "noise", "real_prose"])
def test_a_stream_grows_by_adding_units_and_cuts_long_lines(name):
    stream = HaystackStream(get_haystack(name), 3)
    short, long = stream.units(3000), stream.units(9000)
    if not long:
        pytest.skip(f"no {name} text here")
    assert long[:len(short) - 1] == short[:-1] and long[len(short) - 1].startswith(short[-1])
    assert all(len(u) <= MAX_UNIT_CHARS for u in long)
    assert sum(len(u) + 1 for u in long) <= 9000


def test_a_haystack_that_runs_out_says_so():
    from hf_trajpe.evaluation.ruler.fitting import FitError
    from hf_trajpe.evaluation.ruler.haystacks import Haystack

    tiny = Haystack("tiny", "one short document", "test", lambda seed, n, types: ["just a few words here"])
    with pytest.raises(FitError, match="haystack used up"):
        get_task("niah_single_1").sample(byte_tokenizer(), 3000, tiny, 0, 0)
