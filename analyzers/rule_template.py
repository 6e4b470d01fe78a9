"""Templates of a rule's system prompts: the fixed text, and the slots that vary per request.

A templated system prompt (a customer's name, an amount, per request) is one rule version. The
built-in masks (`analyzers.rule_version.mask_tokens`) already replace dates, ids and e-mail
addresses; what they cannot know — a name — is learned here, from the variants of a prompt:

- `tokenize` splits the prompt as `rule_version.normalize_prompt` sees it (NFC, the rule's
  `fingerprint_ignore`, the masks) into whitespace-separated words, each identified by a short
  keyed-free digest (BLAKE2b, 8 bytes: the same word has the same digest in every process, and a
  stored template holds digests, not the prompt's words). Words that the rule's declared value
  (its value parameter's group `value`) spans are *protected*: never a slot.
- A `Template` is a sequence of word digests and slots (None); `matches` says whether a prompt
  fills it (each slot takes 1 to `SLOT_MAX_WORDS` words), by a set-of-positions scan: linear in
  the prompt, no backtracking.
- `align` compares a prompt with a template (a side-by-side walk over the digests that
  resynchronises after each difference; deterministic and linear in the prompt): the places where
  they differ are `Region`s. A prompt is a *variant* of a template when at least
  `SHARED_MIN` of the template's fixed words are kept and every region replaces at most
  `REGION_MAX_WORDS` words with at most as many. A region that touches a protected word, or only
  inserts or only deletes words, can never become a slot: that is an edit of the fixed text.
- `generalise` turns regions into slots; `template_id` names a template (`fp-` + 12 hex digits):
  a template without slots has the fingerprint the prompt always had (`rule_version.fingerprint`
  of its normalised text), so a static prompt keeps its stored version.

The statistics of which region becomes a slot, and when a variant becomes a version, are the rule
tracker's (`proxy.gateway.rule_templates`); everything here is a pure function of its arguments.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from .rule_version import NORMALIZE_MAX_CHARS, mask_tokens

Template = tuple[str | None, ...]
"""Word digests (16 hex digits) and slots (None), in order."""

WORDS_MAX = 4_096
"""Words of a prompt that take part in templates; the rest is one fixed word (hashed whole)."""
SLOT_MAX_WORDS = 16
"""Words one slot may take in a prompt (a name, an amount, a short phrase)."""
REGION_MAX_WORDS = 16
"""Words a region of a variant may replace, on each side."""
SHARED_MIN = 0.7
"""Share of a template's fixed words a variant keeps."""
SLOT_MARK = "⟨⟩"
"""How a slot is written in a template's canonical text (hashed for `template_id`)."""

_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class PromptWords:
    """A system prompt as templates see it."""

    words: tuple[str, ...]
    """Its words, as normalised (the last holds the rest of a prompt of more than `WORDS_MAX`)."""
    separators: tuple[str, ...]
    """The whitespace before each word (and, last, after the last one): to render it again."""
    digests: tuple[str, ...]
    """Each word's digest."""
    protected: frozenset[int]
    """Indices of the words the rule's declared value spans."""
    fingerprint: str
    """12 hex digits: `rule_version.fingerprint` of the same prompt."""


def word_digest(word: str) -> str:
    """16 hex digits naming a word, the same in every process."""
    raw = word.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(raw, digest_size=8).hexdigest()


def tokenize(
    system_prompt: str,
    ignore: Sequence[re.Pattern[str]] = (),
    parameter: re.Pattern[str] | None = None,
) -> PromptWords:
    """`system_prompt` split into words after the normalisation of `rule_version.fingerprint`
    (NFC, `ignore`, the masks; the prompt's first `NORMALIZE_MAX_CHARS` characters). `parameter`
    is the rule's value regex (named group `value`): the words its values span are protected."""
    head, tail = system_prompt[:NORMALIZE_MAX_CHARS], system_prompt[NORMALIZE_MAX_CHARS:]
    text = unicodedata.normalize("NFC", head)
    for pattern in ignore:
        text = pattern.sub("<ignored>", text)
    text = mask_tokens(text)
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    canonical = " ".join(text[a:b] for a, b in spans)
    if len(spans) > WORDS_MAX:
        spans = [*spans[: WORDS_MAX - 1], (spans[WORDS_MAX - 1][0], spans[-1][1])]
    words = tuple(text[a:b] for a, b in spans)
    separators = tuple(
        text[(spans[i - 1][1] if i else 0) : (spans[i][0] if i < len(spans) else len(text))]
        for i in range(len(spans) + 1)
    )
    protected: set[int] = set()
    if parameter is not None and "value" in parameter.groupindex:
        for found in parameter.finditer(text):
            start, end = found.span("value")
            if start < 0 or start == end:
                continue
            protected.update(i for i, (a, b) in enumerate(spans) if a < end and b > start)
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass"))
    if tail:
        digest.update(tail.encode("utf-8", "surrogatepass"))
        words = (*words, tail) if words else (tail,)
        separators = (*separators, "")
        spans.append((len(text), len(text)))
    return PromptWords(
        words=words,
        separators=separators,
        digests=tuple(word_digest(w) for w in words),
        protected=frozenset(protected),
        fingerprint=digest.hexdigest()[:12],
    )


def concrete(prompt: PromptWords) -> Template:
    """The template a prompt is by itself: its words, no slots."""
    return prompt.digests


def matches(template: Template, digests: Sequence[str | None]) -> bool:
    """Whether `digests` fill `template`: its fixed words in order, each slot taking 1 to
    `SLOT_MAX_WORDS` words (`digests` may be another template: its slots then only fill this
    one's slots). A scan over the set of positions reachable so far: at most
    `len(digests)` positions per element, no backtracking."""
    fixed = sum(1 for e in template if e is not None)
    slots = len(template) - fixed
    size = len(digests)
    if size < fixed + slots or size > fixed + slots * SLOT_MAX_WORDS:
        return False
    positions = {0}
    for element in template:
        if element is None:
            positions = {p + k for p in positions for k in range(1, SLOT_MAX_WORDS + 1)}
            positions = {p for p in positions if p <= size}
        else:
            positions = {p + 1 for p in positions if p < size and digests[p] == element}
        if not positions:
            return False
    return size in positions


@dataclass(frozen=True, slots=True)
class Region:
    """Where a prompt differs from a template: `template[start:end]` (fixed words only) against
    the prompt's words `[p_start:p_end]`."""

    start: int
    end: int
    p_start: int
    p_end: int
    slottable: bool
    """False when it touches a protected word, or only inserts or only deletes words: the fixed
    text was edited there."""


def align(
    template: Template,
    protected: frozenset[int],
    prompt: PromptWords,
) -> tuple[Region, ...] | None:
    """The regions where `prompt` differs from `template`, if it is a variant of it (see the
    module docstring); None if it is not. `protected` are the template's protected elements.
    A slot of the template aligned with words of the prompt is no region (it takes them)."""
    fixed = sum(1 for e in template if e is not None)
    if fixed == 0:
        return None
    present = set(prompt.digests)
    if sum(1 for e in template if e is not None and e in present) < SHARED_MIN * fixed:
        return None  # most of its words are not even there: no walk needed
    walked = _walk(template, prompt.digests)
    if walked is None:
        return None
    kept, differences = walked
    if kept < SHARED_MIN * fixed:
        return None
    regions: list[Region] = []
    for i1, i2, j1, j2 in differences:
        tag = "replace" if i2 > i1 and j2 > j1 else "insert" if j2 > j1 else "delete"
        # Strip the template's slots from the region's edges: they take the prompt's words.
        fixed_in = [i for i in range(i1, i2) if template[i] is not None]
        if not fixed_in and i2 > i1:
            if j2 - j1 > SLOT_MAX_WORDS * (i2 - i1):
                return None
            continue
        if (i2 - i1) > REGION_MAX_WORDS or (j2 - j1) > REGION_MAX_WORDS:
            return None
        touched = any(i in protected for i in range(i1, i2)) or any(
            j in prompt.protected for j in range(j1, j2)
        )
        slottable = (
            tag == "replace" and not touched and all(template[i] is not None for i in range(i1, i2))
        )
        regions.append(Region(i1, i2, j1, j2, slottable))
    return tuple(regions)


ANCHOR_WORDS = 3
"""Equal words after a difference that say where template and prompt agree again."""
DIFFERENCES_MAX = 64
"""Differences past which a prompt is no variant of a template."""


def _walk(
    template: Template, digests: Sequence[str]
) -> tuple[int, list[tuple[int, int, int, int]]] | None:
    """Template and prompt walked side by side: equal words are kept; at a difference, the
    nearest point (fewest words skipped on both sides, each at most `REGION_MAX_WORDS`, or
    `SLOT_MAX_WORDS` past a slot) after which `ANCHOR_WORDS` words agree again (or both end).
    Linear in the prompt (each difference costs at most a few hundred comparisons), unlike a
    general diff, so a long hostile prompt cannot make it slow. (kept words, differences as
    `(start, end, p_start, p_end)`), or None when some difference has no such point."""
    size, length = len(template), len(digests)
    i = j = kept = 0
    differences: list[tuple[int, int, int, int]] = []
    while i < size or j < length:
        if i < size and j < length and template[i] is not None and template[i] == digests[j]:
            i, j, kept = i + 1, j + 1, kept + 1
            continue
        step = _resync(template, digests, i, j)
        if step is None or len(differences) >= DIFFERENCES_MAX:
            return None
        differences.append((i, i + step[0], j, j + step[1]))
        i, j = i + step[0], j + step[1]
    return kept, differences


def _resync(template: Template, digests: Sequence[str], i: int, j: int) -> tuple[int, int] | None:
    reach = REGION_MAX_WORDS + (SLOT_MAX_WORDS if None in template[i : i + 2] else 0)
    for total in range(1, 2 * reach + 1):
        for skip in range(max(0, total - reach), min(total, reach) + 1):
            a, b = i + skip, j + total - skip
            if a <= len(template) and b <= len(digests) and _agree(template, digests, a, b):
                return skip, total - skip
    return None


def _agree(template: Template, digests: Sequence[str], a: int, b: int) -> bool:
    """Whether `ANCHOR_WORDS` fixed words agree from (a, b) on, or both end there first."""
    for k in range(ANCHOR_WORDS):
        if a + k >= len(template) or b + k >= len(digests):
            return a + k >= len(template) and b + k >= len(digests)
        if template[a + k] is None or template[a + k] != digests[b + k]:
            return False
    return True


def substitute(template: Template, regions: Sequence[Region], prompt: PromptWords) -> Template:
    """`template` with each region replaced by the prompt's words there: the variant's own
    template, slots of `template` kept."""
    out: list[str | None] = []
    at = 0
    for region in regions:
        out.extend(template[at : region.start])
        out.extend(prompt.digests[region.p_start : region.p_end])
        at = region.end
    out.extend(template[at:])
    return tuple(out)


def generalise(
    template: Template, protected: frozenset[int], spans: Sequence[tuple[int, int]]
) -> tuple[Template, frozenset[int]]:
    """`template` with each `(start, end)` span made one slot (merged with a slot beside it),
    and its protected elements renumbered."""
    cut = sorted(spans)
    out: list[str | None] = []
    kept: set[int] = set()
    at = 0
    for start, end in cut:
        for i in range(at, start):
            if i in protected:
                kept.add(len(out))
            out.append(template[i])
        if not out or out[-1] is not None:
            out.append(None)
        at = max(at, end)
    for i in range(at, len(template)):
        if template[i] is None and out and out[-1] is None:
            continue
        if i in protected:
            kept.add(len(out))
        out.append(template[i])
    return tuple(out), frozenset(kept)


def renumbering(size: int, spans: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Where each element of a template of `size` elements that `generalise(…, spans)` keeps
    ends up (elements of a template's own slots beside a new one are not kept)."""
    template: Template = tuple(f"{i:016x}" for i in range(size))
    made, _ = generalise(template, frozenset(), spans)
    return {int(e, 16): k for k, e in enumerate(made) if e is not None}


def template_id(template: Template, prompt: PromptWords | None = None) -> str:
    """12 hex digits naming a template. Without slots and with its prompt, the prompt's own
    fingerprint (what versions were before templates); with slots, a hash of the digests."""
    if None not in template and prompt is not None and prompt.digests == template:
        return prompt.fingerprint
    canonical = "\x1f".join(SLOT_MARK if e is None else e for e in template)
    return hashlib.sha256(canonical.encode("ascii", "replace")).hexdigest()[:12]


def render(template: Template, prompt: PromptWords, labels: Sequence[str] | None = None) -> str:
    """`prompt` as text with the words that fill `template`'s slots replaced by `⟨label⟩`
    (`labels[k]` for the k-th slot; by default the word before the slot, lower case without
    punctuation, or `slot`). The prompt's own line breaks and spacing are kept. The prompt must
    match the template."""
    names = list(labels) if labels is not None else slot_labels(template, prompt)
    fills = _fill(template, prompt.digests)
    if fills is None:
        return "".join(s + w for s, w in zip(prompt.separators, prompt.words, strict=False)) + (
            prompt.separators[-1] if len(prompt.separators) > len(prompt.words) else ""
        )
    parts: list[str] = []
    slot = 0
    for element, (start, end) in zip(template, fills, strict=True):
        if element is None:
            parts.append(prompt.separators[start] + f"⟨{names[slot]}⟩")
            slot += 1
        else:
            parts.append(prompt.separators[start] + prompt.words[start])
        del end
    if len(prompt.separators) > len(prompt.words):
        parts.append(prompt.separators[len(prompt.words)])
    return "".join(parts)


def slot_labels(template: Template, prompt: PromptWords) -> list[str]:
    """A name for each slot: the word before it in `prompt`, lower case, letters only (`name:`
    → `name`), else `slot`; a repeated name gets a number."""
    fills = _fill(template, prompt.digests)
    names: list[str] = []
    for k, element in enumerate(template):
        if element is not None:
            continue
        label = "slot"
        if fills is not None and k > 0:
            before = prompt.words[fills[k - 1][0]] if template[k - 1] is not None else ""
            cleaned = re.sub(r"[^\w]|_|\d", "", before).lower()[:24]
            label = cleaned or "slot"
        if label in names:
            label = f"{label}{sum(1 for n in names if n.startswith(label)) + 1}"
        names.append(label)
    return names


def _fill(template: Template, digests: Sequence[str]) -> list[tuple[int, int]] | None:
    """Which words fill each element of `template` (the first filling found), or None."""
    size = len(digests)
    # back[k][p]: the position before element k from which p was reached.
    back: list[dict[int, int]] = []
    positions = {0: -1}
    for element in template:
        nxt: dict[int, int] = {}
        for p in sorted(positions):
            if element is None:
                for k in range(1, SLOT_MAX_WORDS + 1):
                    if p + k <= size:
                        nxt.setdefault(p + k, p)
            elif p < size and digests[p] == element:
                nxt.setdefault(p + 1, p)
        if not nxt:
            return None
        back.append(nxt)
        positions = nxt
    if size not in positions:
        return None
    spans: list[tuple[int, int]] = []
    end = size
    for k in range(len(template) - 1, -1, -1):
        start = back[k][end]
        spans.append((start, end))
        end = start
    spans.reverse()
    return spans


def dumps(template: Template, protected: frozenset[int]) -> str:
    """A template as stored (`rule_events.template`): JSON of its digests (null: a slot) and its
    protected elements. Holds no word of the prompt."""
    return json.dumps({"t": list(template), "p": sorted(protected)}, separators=(",", ":"))


def loads(text: str) -> tuple[Template, frozenset[int]] | None:
    """A stored template; None when `text` is not one (a row written by something else)."""
    try:
        data = json.loads(text)
        elements = data["t"]
        protected = data.get("p", [])
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(elements, list) or not isinstance(protected, list):
        return None
    if not all(e is None or (isinstance(e, str) and len(e) == 16) for e in elements):
        return None
    if not all(isinstance(i, int) and 0 <= i < len(elements) for i in protected):
        return None
    return tuple(elements), frozenset(protected)
