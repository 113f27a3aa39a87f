"""ruler.py — RULER-style long-context retrieval trials, sized with a model's own tokenizer.

    from qgen.models import ruler
    t = ruler.make("single-number-noise", model.tokenizer, 4096, seed=3)
    t.prompt_ids            # len(t.prompt_ids) <= 4096, within one haystack unit of it
    t.answers               # ["4829371"]
    t.needle_token_spans    # [(start, end)]: the tokens of each needle that holds an answer
    ruler.score(generated_text, t.answers)   # True when every answer is in the output

Each task hides short facts ("needles") at chosen depths inside a long filler ("haystack")
and ends with a question whose answer is only in the needles. The filler is either a few
plain sentences of our own repeated ("noise") or natural prose ("text"): the King James
Bible, read from Debian's bible-kjv-text package through its `bible` program (public
domain text; the program is GPL-2+), or any plain-text file named by QGEN_RULER_TEXT.
Without either, the text tasks raise TextUnavailable and callers skip them (never a
silently different haystack).

Tasks (the haystack is part of the name, so a result always says which it used):
  single-number-noise / -text   one needle: a key and a 7-digit number
  single-uuid-noise / -text     one needle: a key and a UUID
  multikey-text                 4 needles with different keys; one key is asked
  multivalue-text               4 needles with one key and 4 numbers; all 4 are asked
  multiquery-text               4 needles with different keys; 2 keys are asked
  vartrack-noise                a chain VAR A = 12345, VAR B = VAR A, ... (4 hops) beside a
                                distractor chain; every variable holding the value is asked
  passkey-noise                 one pass key (a 5-digit number) in noise

Prompts come in two styles: "chat" (the tokenizer's chat template around the instruction,
haystack and question, then the answer cue as the start of the assistant's turn) for
instruct models, and "completion" (plain text ending in the cue, e.g. "The hidden number
for quiet-lantern is") for base models.

A trial is a pure function of (task, tokenizer, n_tokens, seed, style): the needles' keys,
values and depths depend on (task, seed) only, so one seed asks the same question at every
context length.
"""
import bisect
import dataclasses
import os
import random
import re
import shutil
import subprocess
import uuid

TEXT_ENV = "QGEN_RULER_TEXT"
TEXT_PACKAGE = "bible-kjv-text"  # Debian 12 (bookworm), section doc; its `bible` program is in bible-kjv


class TextUnavailable(RuntimeError):
    """The natural-text haystack is missing: the text tasks cannot be made here."""


@dataclasses.dataclass
class Trial:
    task: str
    prompt_ids: list
    answers: list                 # strings; the output must contain every one
    needle_token_spans: list      # [(start, end)) token ranges of the needles holding answers
    meta: dict                    # depth(s), distractor spans, answer spans, max_new, text, ...


# ---- haystacks ---------------------------------------------------------------------------

# Our own filler: plain, repetitive, and free of digits and of the words the needles use.
NOISE = (
    "The hills are quiet this time of year.",
    "A cart rolls slowly down the old road.",
    "Wind comes in from the west over the fields.",
    "Somewhere in the house a clock keeps ticking.",
    "The baker opens his shop before the sun is up.",
    "Rain gathers in the low places of the valley.",
)

_ADJ = ("quiet", "amber", "hollow", "silver", "crooked", "distant", "gentle", "rusty", "velvet", "frozen",
        "golden", "humble", "narrow", "pale", "restless", "sturdy", "tangled", "wild", "woven", "bitter")
_NOUN = ("lantern", "harbor", "meadow", "falcon", "anchor", "orchard", "compass", "kettle", "ladder", "river",
         "saddle", "thistle", "beacon", "pebble", "quarry", "violin", "walnut", "garden", "bridge", "candle")

_text_cache = {}


def _split_sentences(verse):
    """Split a long verse at sentence ends so that haystack units stay short (the length
    fit is exact to within one unit)."""
    parts = re.split(r"(?<=[.;?!:])\s+", verse.strip())
    out, cur = [], ""
    for p in parts:
        cur = f"{cur} {p}".strip()
        if len(cur) >= 40:
            out.append(cur)
            cur = ""
    if cur:
        if out:
            out[-1] += " " + cur
        else:
            out.append(cur)
    return out


def _kjv_lines():
    """The whole KJV through the bible program, one verse a line (reference first)."""
    prog = shutil.which("bible")
    if prog is None or not os.path.exists("/usr/lib/bible.data"):
        return None
    # -f turns pretty-printing off: one verse a line, "Ge1:1 In the beginning ..."
    run = subprocess.run([prog, "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True, check=False,
                         env=dict(os.environ, COLUMNS="100000"))
    if run.returncode != 0 or not run.stdout.strip():
        return None
    return [re.sub(r"^\S+\d+:\d+\s+", "", ln) for ln in run.stdout.splitlines() if ln.strip()]


def text_source(path=None):
    """(name, units): the natural-text haystack as short units in reading order. From path,
    else $QGEN_RULER_TEXT, else Debian's KJV; raises TextUnavailable when none is there."""
    path = path or os.environ.get(TEXT_ENV)
    key = path or "kjv"
    if key in _text_cache:
        return _text_cache[key]
    if path:
        if not os.path.isfile(path):
            raise TextUnavailable(f"{TEXT_ENV} / --text names {path!r}, which is not a file")
        with open(path, encoding="utf-8", errors="replace") as f:
            raw = f.read()
        verses = [ln for ln in raw.splitlines() if ln.strip()]
        name = os.path.basename(path)
    else:
        verses = _kjv_lines()
        if verses is None:
            raise TextUnavailable(
                f"the natural-text haystack needs Debian's {TEXT_PACKAGE} (apt-get install bible-kjv, which brings "
                f"the text and the `bible` program that reads it) or a plain-text file named by ${TEXT_ENV}; "
                f"the *-text tasks are skipped without it")
        name = "kjv"
    units = []
    for v in verses:
        units.extend(_split_sentences(" ".join(v.split())))
    units = [u for u in units if u.isascii()]  # token offsets are found by decoding prefixes: keep to ASCII
    if len(units) < 200:
        raise TextUnavailable(f"the natural text {name!r} has only {len(units)} usable sentences (200 needed)")
    _text_cache[key] = (name, units)
    return _text_cache[key]


def dump_text(out_path, path=None):
    """Write the natural text (one unit a line) to out_path, e.g. to carry it to a machine
    without the Debian package: QGEN_RULER_TEXT=out_path then reads it back unchanged."""
    name, units = text_source(path)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("\n".join(units) + "\n")
    return name, len(units)


def has_text(path=None):
    try:
        text_source(path)
        return True
    except TextUnavailable:
        return False


# ---- task content ------------------------------------------------------------------------

_INSTRUCTION = ("Below is a long passage. A few short facts are tucked away inside it. "
                "Read all of it, then answer the question that follows it.")


@dataclasses.dataclass
class _Content:
    needles: list          # [(text, position in (0,1), answer-bearing: bool, value or None)]
    answers: list
    question: str
    cue: str
    haystack: str          # "noise" or "text"
    meta: dict


def _key(rng, taken):
    while True:
        k = f"{rng.choice(_ADJ)}-{rng.choice(_NOUN)}"
        if k not in taken:
            taken.add(k)
            return k


def _number(rng, digits=7):
    return str(rng.randrange(10 ** (digits - 1), 10 ** digits))


def _uuid(rng):
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _spread(rng, n, lo=0.03, hi=0.97):
    """n needle depths spread over (lo, hi): one drawn in each of n equal slices, so multi-
    needle trials put needles in different parts of the context."""
    w = (hi - lo) / n
    return [lo + w * (i + rng.random()) for i in range(n)]


def _single_depth(seed):
    # Single-needle depth cycles through 5 %, 15 %, ..., 95 % with the seed, so any 10
    # consecutive seeds cover the context evenly (0 % and 100 % sit in the sink and recent
    # windows that every selector keeps, which would flatter sparse attention).
    return 0.05 + 0.1 * (seed % 10)


def _content(task, seed):
    rng = random.Random(f"qgen-ruler|{task}|{seed}")
    taken = set()
    kind, _, hay = task.rpartition("-")
    if kind in ("single-number", "single-uuid"):
        k = _key(rng, taken)
        what = "number" if kind == "single-number" else "code"
        v = _number(rng) if kind == "single-number" else _uuid(rng)
        d = _single_depth(seed)
        return _Content([(f"The hidden {what} for {k} is {v}.", d, True, v)], [v],
                        f"What is the hidden {what} for {k}?", f"The hidden {what} for {k} is", hay,
                        {"depth": d, "key": k})
    if kind == "multikey":
        keys = [_key(rng, taken) for _ in range(4)]
        vals = [_number(rng) for _ in keys]
        depths = _spread(rng, 4)
        ask = rng.randrange(4)
        needles = [(f"The hidden number for {k} is {v}.", d, i == ask, v)
                   for i, (k, v, d) in enumerate(zip(keys, vals, depths))]
        return _Content(needles, [vals[ask]], f"What is the hidden number for {keys[ask]}?",
                        f"The hidden number for {keys[ask]} is", hay,
                        {"depth": depths[ask], "depths": depths, "key": keys[ask], "keys": keys})
    if kind == "multivalue":
        k = _key(rng, taken)
        vals = []
        while len(vals) < 4:
            v = _number(rng)
            if v not in vals:
                vals.append(v)
        depths = _spread(rng, 4)
        needles = [(f"One of the hidden numbers for {k} is {v}.", d, True, v) for v, d in zip(vals, depths)]
        return _Content(needles, vals, f"What are all the hidden numbers for {k}? List every one of them.",
                        f"The hidden numbers for {k} are", hay, {"depths": depths, "key": k})
    if kind == "multiquery":
        keys = [_key(rng, taken) for _ in range(4)]
        vals = [_number(rng) for _ in keys]
        depths = _spread(rng, 4)
        ask = sorted(rng.sample(range(4), 2))
        needles = [(f"The hidden number for {k} is {v}.", d, i in ask, v)
                   for i, (k, v, d) in enumerate(zip(keys, vals, depths))]
        a, b = (keys[i] for i in ask)
        return _Content(needles, [vals[i] for i in ask], f"What are the hidden numbers for {a} and for {b}?",
                        f"The hidden numbers for {a} and for {b} are", hay,
                        {"depths": depths, "keys": keys, "asked": [keys[i] for i in ask]})
    if kind == "vartrack":
        names = set()

        def name():
            while True:
                s = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5))
                if s not in names:
                    names.add(s)
                    return s
        value, other = _number(rng, 5), _number(rng, 5)
        while other == value:
            other = _number(rng, 5)
        needles = []
        chains = []
        for val, asked in ((value, True), (other, False)):
            chain = [name() for _ in range(5)]  # the value, then 4 hops
            chains.append(chain)
            depths = sorted(_spread(rng, 5, 0.03, 0.9))
            needles.append((f"VAR {chain[0]} = {val}.", depths[0], asked, chain[0]))
            for i in range(1, 5):
                needles.append((f"VAR {chain[i]} = VAR {chain[i - 1]}.", depths[i], asked, chain[i]))
        return _Content(needles, list(chains[0]),
                        f"Which variables hold the value {value} after all the assignments above? Name every one.",
                        f"The variables that hold {value} are", hay,
                        {"value": value, "chain": chains[0], "distractor_chain": chains[1],
                         "depths": [n[1] for n in needles if n[2]]})
    if kind == "passkey":
        v = _number(rng, 5)
        d = _single_depth(seed)
        return _Content([(f"Keep this in mind: the pass key is {v}. Once more, the pass key is {v}.", d, True, v)],
                        [v], "What is the pass key?", "The pass key is", hay, {"depth": d})
    raise ValueError(f"unknown task {task!r}")


TASKS = ("single-number-noise", "single-number-text", "single-uuid-noise", "single-uuid-text", "multikey-text",
         "multivalue-text", "multiquery-text", "vartrack-noise", "passkey-noise")


def task_needs_text(task):
    return task.endswith("-text")


# ---- prompt assembly and the length fit --------------------------------------------------

def _haystack_units(hay, seed, text_path):
    """An endless supply of units: unit(i) for i = 0, 1, ... and their source name."""
    if hay == "noise":
        off = seed % len(NOISE)
        return (lambda i: NOISE[(off + i) % len(NOISE)]), "noise"
    name, units = text_source(text_path)
    start = random.Random(f"qgen-ruler-text|{seed}").randrange(len(units))
    return (lambda i: units[(start + i) % len(units)]), name


def _assemble(units, k, content):
    """The haystack of k units with the needles inserted (each at round(pos * k) units in);
    returns the text and each needle's character span in it."""
    slots = {}
    for j, (_, pos, _, _) in enumerate(content.needles):
        slots.setdefault(min(k, max(0, round(pos * k))), []).append(j)
    pieces, spans, at = [], [None] * len(content.needles), 0

    def add(s, j=None):
        nonlocal at
        if pieces:
            pieces.append(" ")
            at += 1
        if j is not None:
            spans[j] = (at, at + len(s))
        pieces.append(s)
        at += len(s)
    for i in range(k + 1):
        for j in slots.get(i, ()):
            add(content.needles[j][0], j)
        if i < k:
            add(units(i))
    return "".join(pieces), spans


def _frame(tokenizer, style, body, content):
    """The whole prompt text around the haystack body, and the body's offset in it."""
    lead = f"{_INSTRUCTION}\n\n"
    user = f"{lead}{body}\n\n{content.question}"
    if style == "chat":
        head = tokenizer.chat(user)
        if user not in head:
            raise ValueError("tokenizer.chat(user) does not hold the user text verbatim")
        return head + content.cue, head.index(user) + len(lead)
    if style == "completion":
        return f"{user}\n{content.cue}", len(lead)
    raise ValueError(f"style = {style!r}; allowed: 'chat' or 'completion'")


class _Prefixes:
    """Maps character offsets of decode(ids) to token indices. A first guess adds up the
    tokens' own decoded lengths; it is then checked against decodes of the true prefixes
    (decode(ids[:i]) must be a prefix of decode(ids)), and bisection over those prefixes
    takes over where the guess is off (a tokenizer that drops a leading space, say)."""

    def __init__(self, tokenizer, ids):
        self.tok, self.ids, self.memo = tokenizer, ids, {0: 0}
        self.cum = [0]
        for t in ids:
            self.cum.append(self.cum[-1] + len(tokenizer.decode([t])))

    def __call__(self, i):
        if i not in self.memo:
            self.memo[i] = len(self.tok.decode(self.ids[:i]))
        return self.memo[i]

    def _last_at_or_before(self, c):
        n = len(self.ids)
        g = max(0, bisect.bisect_right(self.cum, c) - 1)  # guess: the last i with cum[i] <= c
        if self(g) <= c and (g == n or self(g + 1) > c):
            return g
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self(mid) <= c:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _first_at_or_after(self, c, lo):
        n = len(self.ids)
        g = min(n, max(lo, bisect.bisect_left(self.cum, c)))
        if self(g) >= c and (g == lo or self(g - 1) < c):
            return g
        hi = n
        while lo < hi:
            mid = (lo + hi) // 2
            if self(mid) >= c:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def token_span(self, start, end):
        """[s, e): s the last token boundary at or before start, e the first at or after end."""
        s = self._last_at_or_before(start)
        return s, self._first_at_or_after(end, s)


# id(tokenizer) -> {unit: tokens}: the fit's first guesses, kept across trials. Only guesses:
# every length the fit accepts is measured on the whole prompt, so a stale entry (a new
# tokenizer at a reused id) costs a round, never a wrong length.
_unit_lens = {}


def _encode(tokenizer, text):
    return list(tokenizer.encode(text, add_bos=None))


def make(task, tokenizer, n_tokens, seed, style="chat", text_path=None):
    """One trial of task with at most n_tokens prompt tokens (and within one haystack unit of
    it), deterministic in (task, n_tokens, seed, style, tokenizer). tokenizer needs
    encode(text, add_bos=None) -> ids, decode(ids) -> str and, for style="chat",
    chat(user_text) -> str. Raises TextUnavailable for a *-text task without the text."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; tasks: {', '.join(TASKS)}")
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 256:
        raise ValueError(f"n_tokens = {n_tokens!r} must be an integer >= 256")
    content = _content(task, seed)
    units, source = _haystack_units(content.haystack, seed, text_path)
    unit_len = _unit_lens.setdefault(id(tokenizer), {})

    def ulen(i):  # one unit's tokens on its own, with the space that joins it: an estimate
        u = units(i)
        if u not in unit_len:
            unit_len[u] = max(1, len(_encode_plain(tokenizer, " " + u)))
        return unit_len[u]

    def build(k):
        body, nspans = _assemble(units, k, content)
        text, off = _frame(tokenizer, style, body, content)
        return text, [(a + off, b + off) for a, b in nspans]

    # First guess from the frame alone plus the units' own lengths, then correct with the
    # true length of the whole prompt; each round moves k by the units that fill the gap.
    base = len(_encode(tokenizer, build(0)[0]))
    if base > n_tokens:
        raise ValueError(f"{task}: the prompt without haystack is already {base} tokens > n_tokens = {n_tokens}")
    k, room = 0, n_tokens - base
    while room > 0:
        room -= ulen(k)
        if room >= 0:
            k += 1
    seen, kept = {}, {}
    for _ in range(24):
        if k not in seen:
            ids = _encode(tokenizer, build(k)[0])
            seen[k], kept = len(ids), {k: ids}
        n = seen[k]
        if n > n_tokens:
            over, step = n - n_tokens, 0
            while over > 0 and step < k:
                step += 1
                over -= ulen(k - step)
            k -= max(1, step)
            continue
        gap = n_tokens - n
        if gap < ulen(k) + 2 or (k + 1) in seen and seen[k + 1] > n_tokens:
            break  # the next unit would not fit (by its own length, or measured)
        step, g = 0, gap
        while g - ulen(k + step) >= 0:
            g -= ulen(k + step)
            step += 1
        k += max(1, step)
    else:
        k = max((i for i, n in seen.items() if n <= n_tokens), default=0)
    text, cspans = build(k)
    ids = kept[k] if k in kept else _encode(tokenizer, text)
    if len(ids) > n_tokens:  # cannot happen after the loop, but never hand back an oversized prompt
        raise AssertionError(f"{task}: fitted prompt is {len(ids)} > {n_tokens} tokens")

    # Needle spans in token indices: find each needle in the decoded prompt (decode may drop
    # a BOS or render special tokens, so offsets come from the decode, not from text).
    decoded = tokenizer.decode(ids)
    shift = decoded.find(text[cspans[0][0]:cspans[0][1]]) - cspans[0][0] if cspans else 0
    pre = _Prefixes(tokenizer, ids)
    spans, distract, answer_spans = [], [], []
    for (ntext, pos, asked, value), (a, b) in zip(content.needles, cspans):
        a, b = a + shift, b + shift
        if decoded[a:b] != ntext:
            raise AssertionError(f"{task}: needle {ntext!r} not found in the decoded prompt at {a}")
        span = pre.token_span(a, b)
        (spans if asked else distract).append(span)
        if asked and value is not None:
            va = a + ntext.rindex(value)
            answer_spans.append(pre.token_span(va, va + len(value)))
    answer_text = ", ".join(content.answers)
    meta = dict(content.meta)
    meta.update({
        "seed": seed, "n_tokens": n_tokens, "prompt_tokens": len(ids), "style": style, "haystack": source,
        "haystack_units": k, "needles": len(content.needles), "distractor_spans": distract,
        "answer_token_spans": answer_spans, "question": content.question, "cue": content.cue,
        # room for the answer as the model would write it (all answers, separators) plus a
        # few, and a few more per further answer: lists come numbered or with labels
        "max_new": len(_encode_plain(tokenizer, " " + answer_text)) + 6 + 4 * (len(content.answers) - 1),
    })
    return Trial(task, ids, list(content.answers), spans, meta)


def _encode_plain(tokenizer, text):
    return list(tokenizer.encode(text, add_bos=False))


def document(tokenizer, n_tokens, seed, text_path=None):
    """Exactly n_tokens ids of plain natural text (no needle, no instruction) from a seed-
    chosen place in the text: the prefix of the free-running agreement runs. Raises
    TextUnavailable without the text."""
    units, _ = _haystack_units("text", seed, text_path)
    k = 256
    while True:  # whole re-encodes, doubling the units until there are enough tokens
        ids = _encode(tokenizer, " ".join(units(j) for j in range(k)))
        if len(ids) >= n_tokens:
            return ids[:n_tokens]
        k *= 2


# ---- scoring -----------------------------------------------------------------------------

def normalize(text):
    """Lower case, whitespace collapsed to single spaces."""
    return " ".join(text.lower().split())


def answer_hits(output, answers):
    """For each answer, whether it stands in the output as a whole item: not a piece of a
    longer run of letters or digits (4829371 does not match 48293712)."""
    out = normalize(output)
    hits = []
    for a in answers:
        pat = r"(?<![0-9a-z])" + re.escape(normalize(a)) + r"(?![0-9a-z])"
        hits.append(re.search(pat, out) is not None)
    return hits


def answer_part(output, answers):
    """The part of the output that is scored: for one answer its first non-empty line (a
    base model goes on past the answer, and a number it writes later, a distractor's or a
    corrected one, must not count), for several answers all of it (lists span lines)."""
    if len(answers) == 1:
        for line in output.splitlines():
            if line.strip():
                return line
        return ""
    return output


def score(output, answers):
    """Exact match: True when every answer is in the scored part of the output
    (answer_part, answer_hits)."""
    return all(answer_hits(answer_part(output, answers), answers))


def wilson(k, n, z=1.959963984540054):
    """95 % Wilson score interval of k successes in n trials: (low, high); (0, 1) for n = 0."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / d
    return max(0.0, c - h), min(1.0, c + h)


def _main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(prog="python3 -m qgen.models.ruler",
                                 description="RULER-style trials. dump-text writes the natural-text haystack to a "
                                             "file, for machines without Debian's bible-kjv-text (point "
                                             f"{TEXT_ENV} at it there).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump-text", help="write the natural text, one unit a line")
    d.add_argument("out")
    args = ap.parse_args(argv)
    if args.cmd == "dump-text":
        name, n = dump_text(args.out)
        print(f"wrote {n} units of {name} to {args.out}")


if __name__ == "__main__":
    _main()
