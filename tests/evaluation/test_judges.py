"""Judges and the shipped routing-evaluation datasets."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.evaluation import judges
from app.evaluation.judges import (
    EvalItem,
    first_number,
    judge,
    last_number,
    load_items,
    normalise,
    numbers,
)

DATA = Path(__file__).resolve().parents[2] / "bench" / "data"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Paris", "paris"),
        ("  **Paris**.\n", "paris"),
        ("New   York\tCity!", "new york city"),
        ('"Hello, World!"', "hello, world"),
        ("`len`", "len"),
        ("C#", "c#"),
        ("50%!", "50%"),
        ("-5", "-5"),
        ("- Paris", "paris"),
        ("...", ""),
        ("", ""),
    ],
)
def test_normalise(text: str, expected: str) -> None:
    assert normalise(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42.0),
        ("The answer is 1,000.", 1000.0),
        ("1,234,567 people", 1234567.0),
        ("-3.5 degrees", -3.5),
        ("x = \u22127", -7.0),
        ("It is .5", 0.5),
        ("3.14.", 3.14),
        ("forty-two", 42.0),
        ("Forty two apples", 42.0),
        ("twenty", 20.0),
        ("It has seven continents", 7.0),
        ("zero", 0.0),
        ("minus twelve", -12.0),
        ("two hundred and five", 205.0),
        ("one thousand two hundred thirty-four", 1234.0),
        ("five six", 5.0),
        ("1,2,3", 1.0),
        ("1,0000", 1.0),
        ("H2O has 3 atoms", 3.0),
        ("5 - 3", 5.0),
        ("no number here", None),
        ("", None),
    ],
)
def test_first_number(text: str, expected: float | None) -> None:
    assert first_number(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9 + 8 = 17", [9.0, 8.0, 17.0]),
        ("two hundred and five, then 3", [205.0, 3.0]),
        ("minus seven and 1,000", [-7.0, 1000.0]),
        ("five six", [5.0, 6.0]),
        ("none", []),
    ],
)
def test_numbers_in_order(text: str, expected: list[float]) -> None:
    assert numbers(text) == expected
    assert last_number(text) == (expected[-1] if expected else None)


EXACT = {"type": "exact", "answers": ["Paris", "Paris, France"]}
CONTAINS_ANY = {"type": "contains", "answers": ["blue whale", "whale"]}
CONTAINS_ALL = {"type": "contains", "answers": ["red", "blue"], "all": True}
REGEX = {"type": "regex", "pattern": r"\bNa\b"}
REGEX_I = {"type": "regex", "pattern": r"^yes\b", "flags": "i"}
NUMERIC = {"type": "numeric", "value": 1000}
NUMERIC_TOL = {"type": "numeric", "value": 299792, "tolerance": 1000}
NUMERIC_NEG = {"type": "numeric", "value": -61}
NUMERIC_DEC = {"type": "numeric", "value": 10.03, "tolerance": 1e-6}


@pytest.mark.parametrize(
    ("answer", "spec", "expected"),
    [
        ("Paris", EXACT, True),
        ("  paris. ", EXACT, True),
        ("PARIS!", EXACT, True),
        ("paris,   france", EXACT, True),
        ("The capital is Paris.", EXACT, False),
        ("Lyon", EXACT, False),
        ("It is the blue whale.", CONTAINS_ANY, True),
        ("WHALES", CONTAINS_ANY, False),  # whole words only
        ("A whale-shark", CONTAINS_ANY, True),
        ("Red and Blue", CONTAINS_ALL, True),
        ("red only", CONTAINS_ALL, False),
        ("bored", {"type": "contains", "answers": ["red"]}, False),
        ("Use C# here", {"type": "contains", "answers": ["C#"]}, True),
        ("The symbol is Na.", REGEX, True),
        ("The symbol is NaCl", REGEX, False),
        ("na", REGEX, False),
        ("Yes, it is.", REGEX_I, True),
        ("No.", REGEX_I, False),
        ("1000", NUMERIC, True),
        ("1,000 exactly", NUMERIC, True),
        ("one thousand", NUMERIC, True),
        ("1000.0", NUMERIC, True),
        ("999", NUMERIC, False),
        ("no idea", NUMERIC, False),
        ("1000 then 100", NUMERIC, False),  # the LAST number counts by default
        ("9 + 8 = 1000", NUMERIC, True),
        ("1000 then 100", {**NUMERIC, "pick": "first"}, True),
        ("100 then 1000", {**NUMERIC, "pick": "first"}, False),
        ("About 300,000 km/s", NUMERIC_TOL, True),
        ("About 200,000 km/s", NUMERIC_TOL, False),
        ("-61", NUMERIC_NEG, True),
        ("The result is \u221261.", NUMERIC_NEG, True),
        ("61", NUMERIC_NEG, False),
        ("10.03", NUMERIC_DEC, True),
        ("10.3", NUMERIC_DEC, False),
        ("seven", {"type": "numeric", "value": 7}, True),
        ("ninety", {"type": "numeric", "value": 90}, True),
    ],
)
def test_judge_table(answer: str, spec: dict[str, Any], expected: bool) -> None:
    assert judge(answer, spec) is expected


MALFORMED_SPECS = pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "fuzzy", "answers": ["x"]}, "unknown judge type"),
        ({"answers": ["x"]}, "unknown judge type"),
        ({"type": "exact"}, "'answers'"),
        ({"type": "exact", "answers": []}, "'answers'"),
        ({"type": "exact", "answers": ["..."]}, "non-blank"),
        ({"type": "exact", "answers": [3]}, "non-blank"),
        ({"type": "exact", "answer": ["x"]}, "unknown key"),
        ({"type": "contains", "answers": ["x"], "all": "yes"}, "'all'"),
        ({"type": "regex"}, "'pattern'"),
        ({"type": "regex", "pattern": "("}, "bad pattern"),
        ({"type": "regex", "pattern": "x", "flags": "q"}, "unknown flag"),
        ({"type": "numeric"}, "'value'"),
        ({"type": "numeric", "value": "42"}, "'value'"),
        ({"type": "numeric", "value": True}, "'value'"),
        ({"type": "numeric", "value": 1, "tolerance": -1}, "'tolerance'"),
        ({"type": "numeric", "value": 1, "pick": "middle"}, "'pick'"),
    ],
)


@MALFORMED_SPECS
def test_malformed_spec(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        judge("anything", spec)


@MALFORMED_SPECS
def test_malformed_spec_is_refused_when_the_item_is_built(
    spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as by_judge:
        judge("anything", spec)
    with pytest.raises(ValueError, match=message) as by_item:
        EvalItem("fact-001", "fact", "p", spec, "anything")
    assert str(by_item.value) == str(by_judge.value)


def test_an_items_spec_is_validated_once_not_per_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    validated: list[Mapping[str, Any]] = []
    real = judges.validate_spec
    monkeypatch.setattr(judges, "validate_spec", lambda spec: (validated.append(spec), real(spec)))
    spec = {"type": "numeric", "value": 7}
    item = EvalItem("arithmetic-001", "arithmetic", "3 + 4?", spec, "7")
    answers = ("7", "seven", "It is 8.", "")
    assert [item.passes(answer) for answer in answers] == [True, True, False, False]
    assert [judge(answer, spec) for answer in answers] == [True, True, False, False]
    assert validated == [spec] + [spec] * len(answers)  # the item once; judge() every call


def test_spec_not_a_mapping() -> None:
    with pytest.raises(ValueError, match="must be an object"):
        judge("x", ["exact"])  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- properties

_padding = st.text(alphabet=" \t\n.,!?*`\"'()", max_size=4)
_words = st.text(alphabet=st.characters(categories=["L", "Nd"]), min_size=1, max_size=8)
# Words whose case round-trips: lowercasing "ŉ".upper() gives "ʼn", so no casing rule can match.
_answer = (
    st.lists(_words, min_size=1, max_size=4)
    .map(" ".join)
    .filter(lambda s: s.upper().lower() == s.lower() == s.title().lower())
)


@given(st.text())
def test_normalise_idempotent(text: str) -> None:
    once = normalise(text)
    assert normalise(once) == once


@given(_answer, _padding, _padding, st.sampled_from([str.upper, str.lower, str.title, str]))
def test_exact_accepts_casing_and_padding(answer: str, left: str, right: str, case: Any) -> None:
    assert judge(left + case(answer) + right, {"type": "exact", "answers": [answer]})


@given(_answer, _padding)
def test_contains_finds_the_answer_in_a_sentence(answer: str, pad: str) -> None:
    assert judge(
        f"I think it is {answer.upper()}{pad} indeed", {"type": "contains", "answers": [answer]}
    )


_values = st.one_of(
    st.integers(min_value=-(10**12), max_value=10**12),
    st.decimals(min_value=-(10**6), max_value=10**6, places=3, allow_nan=False).map(float),
)


@given(_values, st.sampled_from(["{}", "The answer is {}.", "{} units", "= {}!", "**{}**"]))
def test_numeric_accepts_value_embedded_in_text(value: float, template: str) -> None:
    assert judge(template.format(value), {"type": "numeric", "value": value})


@given(st.integers(min_value=1000, max_value=10**12))
def test_numeric_handles_thousands_separators(value: int) -> None:
    assert first_number(f"about {value:,} of them") == value


# ---------------------------------------------------------------------------- load_items


def _line(**overrides: Any) -> str:
    item = {
        "id": "fact-001",
        "kind": "fact",
        "prompt": "Capital of France?",
        "judge": {"type": "contains", "answers": ["paris"]},
        "reference": "Paris.",
    }
    item.update(overrides)
    return json.dumps({k: v for k, v in item.items() if v is not None})


def test_load_items_parses_and_skips_blank_lines() -> None:
    items = load_items([_line(), "", "  \n", _line(id="fact-002")])
    assert [item.id for item in items] == ["fact-001", "fact-002"]
    assert items[0] == EvalItem(
        "fact-001",
        "fact",
        "Capital of France?",
        {"type": "contains", "answers": ["paris"]},
        "Paris.",
    )
    assert items[0].passes("It is Paris")
    with pytest.raises(AttributeError):
        items[0].id = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: "),
        ("[1, 2]", "line 2: expected a JSON object"),
        (_line(reference=None), "line 2: missing key"),
        (_line(extra=1), "line 2: unknown key"),
        (_line(kind="poetry"), "line 2: unknown kind"),
        (_line(prompt="  "), "line 2: 'prompt' must be text"),
        (_line(judge={"type": "nope"}), "line 2: unknown judge type"),
        (_line(reference="Lyon"), "line 2: reference does not pass"),
        (_line(id="fact-000"), "line 2: duplicate id"),
    ],
)
def test_load_items_rejects_bad_lines(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_items([_line(id="fact-000"), line])


# ------------------------------------------------------------------------ shipped datasets

KIND_SHARES = {  # (min, max) share of each kind: the mix the README promises
    "fact": (0.22, 0.38),
    "arithmetic": (0.18, 0.32),
    "code": (0.10, 0.20),
    "reasoning": (0.10, 0.20),
    "open": (0.10, 0.20),
}


def _load(name: str) -> list[EvalItem]:
    return load_items((DATA / name).read_text(encoding="utf-8").splitlines())


@pytest.mark.parametrize(
    ("name", "minimum"), [("routing_eval.jsonl", 220), ("routing_tune.jsonl", 120)]
)
def test_shipped_dataset_shape(name: str, minimum: int) -> None:
    items = _load(name)
    assert len(items) >= minimum
    counts = Counter(item.kind for item in items)
    for kind, (low, high) in KIND_SHARES.items():
        assert low <= counts[kind] / len(items) <= high, (kind, counts)
    for item in items:
        assert item.id.startswith(f"{item.kind}-"), item.id
        assert item.passes(item.reference), item.id


def test_shipped_datasets_are_disjoint() -> None:
    evaluation, tune = _load("routing_eval.jsonl"), _load("routing_tune.jsonl")
    ids = [item.id for item in evaluation] + [item.id for item in tune]
    assert len(set(ids)) == len(ids)
    prompts_eval = {normalise(item.prompt) for item in evaluation}
    prompts_tune = {normalise(item.prompt) for item in tune}
    assert not prompts_eval & prompts_tune
