"""Templates of system prompts: words, digests, matching, alignment, slots and rendering."""

from __future__ import annotations

import re

from analyzers.rule_template import (
    SLOT_MAX_WORDS,
    WORDS_MAX,
    align,
    concrete,
    dumps,
    generalise,
    loads,
    matches,
    render,
    slot_labels,
    template_id,
    tokenize,
    word_digest,
)
from analyzers.rule_version import NORMALIZE_MAX_CHARS, fingerprint

VALUE = re.compile(r"max_weight\s*=\s*(?P<value>\d+)")


def prompt(name: str, weight: int = 100, total: str = "$42.10") -> str:
    return (
        f"You are Parcelly's assistant.\nCustomer: {name} <x@example.com>. Today is 2026-12-01.\n"
        f"Order total {total}. Rules: max_weight = {weight} kg. Be concise."
    )


def test_words_keep_the_fingerprint_and_digests_are_the_same_in_every_process() -> None:
    text = prompt("Ada Lovelace")
    words = tokenize(text, (), VALUE)
    assert words.fingerprint == fingerprint(text)  # a static prompt keeps its stored version
    assert template_id(concrete(words), words) == words.fingerprint
    assert words.digests[0] == word_digest("You")
    assert word_digest("You") == word_digest("You") and len(word_digest("You")) == 16
    assert "<<email>>." in words.words and "<date>." in words.words  # the masks ran first
    protected = {words.words[i] for i in words.protected}
    assert protected == {"100"}  # the declared value's word


def test_a_name_is_a_region_a_declared_value_is_never_a_slottable_one() -> None:
    ada = tokenize(prompt("Ada Lovelace"), (), VALUE)
    bob = tokenize(prompt("Bob"), (), VALUE)
    template = concrete(ada)
    regions = align(template, ada.protected, bob)
    assert regions is not None and len(regions) == 1 and regions[0].slottable
    slotted, protected = generalise(template, ada.protected, [(r.start, r.end) for r in regions])
    assert matches(slotted, ada.digests) and matches(slotted, bob.digests)
    heavier = tokenize(prompt("Grace Hopper", weight=150), (), VALUE)
    assert not matches(slotted, heavier.digests)
    edit = align(slotted, protected, heavier)
    assert edit is not None and [r.slottable for r in edit] == [False]  # 100 → 150: protected
    # Without a declared value the number is an ordinary word, and could become a slot.
    plain = tokenize(prompt("Grace Hopper", weight=150))
    loose = align(concrete(tokenize(prompt("Grace Hopper"))), frozenset(), plain)
    assert loose is not None and [r.slottable for r in loose] == [True]


def test_an_unrelated_prompt_or_an_added_sentence_is_no_slot() -> None:
    ada = tokenize(prompt("Ada"), (), VALUE)
    assert align(concrete(ada), ada.protected, tokenize("Translate to French.")) is None
    longer = tokenize(prompt("Ada") + " Never promise refunds.", (), VALUE)
    regions = align(concrete(ada), ada.protected, longer)
    assert regions is not None and [r.slottable for r in regions] == [False]


def test_slots_take_one_to_sixteen_words_and_matching_does_not_backtrack() -> None:
    template = (word_digest("a"), None, word_digest("b"), None, word_digest("c"))
    fill = [word_digest(w) for w in ["a", "x", "b", "y", "c"]]
    assert matches(template, fill)
    many = [word_digest("a"), *[word_digest("x")] * SLOT_MAX_WORDS, word_digest("b")]
    assert matches((word_digest("a"), None, word_digest("b")), many)
    assert not matches((word_digest("a"), None, word_digest("b")), [*many[:1], *many])
    assert not matches(template, [word_digest(w) for w in ["a", "b", "c"]])  # a slot is 1+ words
    # A long run of one word against many slots: the set of positions stays small.
    repeated = [word_digest("w")] * 4000
    assert not matches(tuple([None, word_digest("w")] * 200 + [word_digest("z")]), repeated)


def test_render_writes_slots_in_the_prompts_own_lines_and_labels_them() -> None:
    ada = tokenize(prompt("Ada Lovelace", total="$7.00"), (), VALUE)
    bob = tokenize(prompt("Bob", total="$120.99"), (), VALUE)
    regions = align(concrete(ada), ada.protected, bob)
    assert regions is not None
    slotted, _ = generalise(concrete(ada), ada.protected, [(r.start, r.end) for r in regions])
    assert slot_labels(slotted, bob) == ["customer", "total"]
    text = render(slotted, bob)
    assert text.splitlines() == [
        "You are Parcelly's assistant.",
        "Customer: ⟨customer⟩ <<email>>. Today is <date>.",
        "Order total ⟨total⟩ Rules: max_weight = 100 kg. Be concise.",
    ]
    assert template_id(slotted) == template_id(slotted, bob) != ada.fingerprint


def test_huge_prompts_are_bounded_and_stored_templates_hold_digests_only() -> None:
    huge = ("word " * (WORDS_MAX * 2)) + "x" * (NORMALIZE_MAX_CHARS)
    words = tokenize(huge)
    assert len(words.words) <= WORDS_MAX + 1
    assert words.fingerprint == fingerprint(huge)
    ada = tokenize(prompt("Ada"), (), VALUE)
    stored = dumps(concrete(ada), ada.protected)
    assert "Ada" not in stored and "Parcelly" not in stored
    assert loads(stored) == (concrete(ada), ada.protected)
    for junk in ("", "[]", '{"t": [1]}', '{"t": ["abc"]}', '{"t": [], "p": [3]}', "{"):
        assert loads(junk) is None
