"""Whether a draft agrees with the verified answer: the facts that decide correctness
must match, not the surface. Pure.

Surface similarity cannot see the one token that matters (``12 times 7 is 72.`` against
``... 84.`` scores 0.875) and punishes a right answer said differently (``Paris.`` against
a sentence). ``agree`` compares the facts instead, each a rule of its own, checked in
order; the first that fails names the disagreement:

* ``code_differs``: the verified answer has fenced code and the draft's, normalised
  (comments and whitespace away, one kind of quote), is not the same;
* ``choice_differs``: the question offers a choice ("Which is larger, 1/2 or 1/3?", "Is
  Brazil a country or a city?"), the verified answer picks one option, and the draft does
  not pick it alone (an option after "than" or "not" is not picked);
* ``polarity_differs``: a yes/no (true/false) answer, or a negation, that the other
  does not share; when the verified answer leads with yes/no, that is its answer and the
  rest is its reason (``same_polarity``);
* ``numbers_differ``: a number the verified answer asserts (digits or words, with its
  unit) is missing from the draft, or the draft's own last number is not one of the
  verified answer's;
* ``terms_missing``: a quoted literal of the verified answer (``'XYZ'``, to the letter)
  or a key term it asserts (a word that is not in the
  question, not a stop word: names, places, identifiers, the answer word) is missing
  from the draft. A long verified answer (an explanation) needs every name, number and
  identifier, and most of its other terms (``min_term_coverage``).

Words and numbers the question already holds are context, not claims: "The capital of
Canada is Ottawa." asserts only *Ottawa* when the question was about Canada's capital.
Words are compared folded (case, accents, a plural ``s``). A draft may say more than the
verified answer (the check is what the verified answer asserts), except numbers: a
draft ending on a number the verified answer does not hold has answered differently.

``similarity`` (the seed's rapidfuzz ratio) stays a secondary signal: the merge reports
it, and ``mode="similarity"`` is the seed's behaviour.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from app.routing.facts import FENCE, POLAR, STOP, Facts, facts, fold, question_words

# The question asks for the answer alone: a draft that is a paragraph has not given it.
# (A yes/no question is judged by its polarity, however long the draft.)
_BRIEF = re.compile(r"\b(just|only|one word|single word|in one|briefly)\b", re.I)
# A choice: the question's last clause ends "A or B?" (a comma inside a number is no break).
_CLAUSE = re.compile(r"(?:^|[,:;.](?!\d))\s*([^,:;?]*?(?:\d,\d[^,:;?]*?)*)\s+or\s+([^,:;?]+)\?")
# A quoted literal ('XYZ', `None`) is a fact to the letter: case and all.
_QUOTED = re.compile(r"(?<!\w)([\"'`])([^\"'`\n]{1,40}?)\1(?!\w)")
_ARTICLES = frozenset({"a", "an", "the"})
_TOKEN = re.compile(r"-?\d+(?:[.,/]\d+)*|[^\W\d_][\w'-]*")
_NOT_PICKED = re.compile(
    r"(?:\bthan|\bnot|\bnor|n't)(?:\s+(?:a|an|the|-?\d[\d.,/]*))?\s*$", re.IGNORECASE
)
_LONG_ANSWER_TERMS = 8  # more key terms than this: an explanation, judged by coverage


@dataclass(frozen=True, slots=True)
class Agreement:
    """Whether the draft agrees; ``reason`` names the rule that decided it."""

    agrees: bool
    reason: str
    missing: tuple[str, ...] = ()  # the facts of the verified answer the draft lacks


def agree(
    draft: str,
    verified: str,
    *,
    prompt: str = "",
    min_term_coverage: float = 0.7,
) -> Agreement:
    """Whether ``draft`` asserts the facts ``verified`` asserts (see the module doc)."""
    context = question_words(prompt)
    d, v = facts(draft, context), facts(verified, context)
    if v.code is not None:
        same = d.code is not None and d.code == v.code
        return Agreement(same, "same_code" if same else "code_differs")
    if _BRIEF.search(prompt) and v.words <= 4 and d.words > 2 * v.words + 3:
        return Agreement(False, "form_differs", ("a short answer",))
    if (choice := _choice(prompt, draft, verified)) is not None:
        return choice
    if v.polarity is not None:
        if d.polarity != v.polarity:
            return Agreement(False, "polarity_differs", ("yes" if v.polarity else "no",))
        return Agreement(True, "same_polarity")
    if v.words >= 3 and v.negated != d.negated and v.polarity is None and d.polarity is None:
        return Agreement(False, "polarity_differs", ("negation",))
    if missing_numbers := _missing_numbers(d, v):
        return Agreement(False, "numbers_differ", missing_numbers)
    if literals := tuple(q for q in _quoted(verified) if q not in prompt and q not in draft):
        return Agreement(False, "terms_missing", literals)
    # An answer the question spelled out ("the Sun or the Moon?"): its own words are the
    # facts; an answer of stop words only ("for") is its words.
    terms = v.terms or (v.answer_words or v.all_words if not v.numbers else frozenset())
    missing = sorted(terms - d.all_words)
    if len(terms) > _LONG_ANSWER_TERMS:
        names_missing = sorted(v.names - d.all_words)
        covered = 1 - len(missing) / len(terms)
        if names_missing or covered < min_term_coverage:
            return Agreement(False, "terms_missing", tuple(names_missing or missing))
    elif missing:
        return Agreement(False, "terms_missing", tuple(missing))
    return Agreement(True, "same_facts")


def _choice(prompt: str, draft: str, verified: str) -> Agreement | None:
    """The choice rule, when the question offers two options and the verified answer picks
    one of them; None otherwise."""
    options = _options(prompt)
    if options is None:
        return None
    picked = [_picks(verified, tokens) for tokens in options]
    if picked.count(True) != 1:
        return None
    chosen, other = options if picked[0] else options[::-1]
    agrees = _picks(draft, chosen) and not _picks(draft, other)
    if agrees:
        return Agreement(True, "same_choice")
    return Agreement(False, "choice_differs", chosen)


@lru_cache(maxsize=256)
def _options(prompt: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The two options' distinctive tokens ("1 kg of iron or 2 kg of feathers?": ("1",
    "iron") and ("2", "feather")); None when the question offers no choice."""
    found = _CLAUSE.findall(prompt)
    if not found:
        return None
    left, right = (_TOKEN.findall(side.lower()) for side in found[-1])
    left = left[-len(right) :]
    if articles := [i for i, w in enumerate(left) if w in _ARTICLES]:
        left = left[articles[-1] :]
    a, b = (tuple(_fold_option(w) for w in side if w not in STOP) for side in (left, right))
    a, b = tuple(w for w in a if w not in b), tuple(w for w in b if w not in a)
    if not a or not b or {a[0], b[0]} <= set(POLAR):
        return None
    return a, b


def _quoted(text: str) -> list[str]:
    return [match.group(2) for match in _QUOTED.finditer(FENCE.sub(" ", text))]


def _fold_option(token: str) -> str:
    return token if _is_number_token(token) else fold(token)


def _is_number_token(token: str) -> bool:
    return token[0].isdigit() or token[0] == "-"


def _picks(text: str, tokens: tuple[str, ...]) -> bool:
    """``text`` names one of an option's tokens, not after "than" or "not"."""
    for token in tokens:
        pattern = (
            rf"(?<![\w.,-]){re.escape(token)}(?![\w]|[.,]\d)"
            if _is_number_token(token)
            else rf"\b{re.escape(token)}(?:e?s)?\b"
        )
        for match in re.finditer(pattern, text, re.IGNORECASE):
            if not _NOT_PICKED.search(text[max(match.start() - 12, 0) : match.start()]):
                return True
    return False


def _missing_numbers(d: Facts, v: Facts) -> tuple[str, ...]:
    """The verified answer's numbers the draft lacks; or the draft's last number, when the
    verified answer does not hold it."""
    d_values = {value for value, _ in d.numbers}
    missing = tuple(
        _show(value, unit)
        for value, unit in v.numbers
        if value not in d_values or not _unit_agrees(value, unit, d.numbers)
    )
    if missing:
        return missing
    if v.numbers and d.numbers and d.numbers[-1][0] not in {value for value, _ in v.numbers}:
        return (_show(*d.numbers[-1]),)
    return ()


def _unit_agrees(value: float, unit: str, others: tuple[tuple[float, str], ...]) -> bool:
    """Some mention of ``value`` in ``others`` has the same unit, or one of them has none."""
    units = {u for x, u in others if x == value}
    return not unit or "" in units or unit in units


def _show(value: float, unit: str) -> str:
    number = str(int(value)) if value == int(value) else str(value)
    return f"{number} {unit}".strip()
