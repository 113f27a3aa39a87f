"""tokenizer.py — the two tokenizers a GGUF file can describe, written from their
definitions (no tokenizer library):

- "gpt2": byte-level BPE. Text is pre-split into pieces (digits one by one, then GPT-2's
  pattern of contractions, letter runs, number runs, punctuation runs and whitespace),
  each piece's UTF-8 bytes are spelt in GPT-2's printable byte alphabet, and the merges
  are applied lowest rank first.
- "llama": SentencePiece-style BPE over scores. Spaces become U+2581, the text starts as
  single characters, and the adjacent pair whose concatenation is a vocabulary piece with
  the highest score is merged until none is left; a piece that is not in the vocabulary
  falls back to its UTF-8 bytes as <0xNN> tokens.

Both match control tokens (<|im_end|>, <start_of_turn>, ...) whole when special=True, and
user-defined tokens (Gemma's runs of newlines and spaces, HTML tags) always, longest first,
before the ordinary algorithm sees the text between them.
"""
import heapq
import re
import unicodedata

# GGUF token types (llama.cpp's enum): what each vocabulary entry is
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Unicode's White_Space property: what the pre-tokenizer's \s means. (str.isspace() also
# counts U+001C..U+001F, which the pattern does not.)
_WHITESPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                        + "".join(chr(c) for c in range(0x2000, 0x200B)))
_CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")
SPM_SPACE = "\u2581"


def _byte_alphabet():
    """GPT-2's map of the 256 byte values to printable characters: the bytes that are
    printable Latin-1 stand for themselves, the others (control codes, space, ...) take
    the code points from 256 on, in byte order, so every token is a visible string."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = _byte_alphabet()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


_CLASS_OF = {}


def _char_class(c):
    """'s' whitespace, 'L' letter, 'N' number, 'o' anything else (the classes of the
    pre-tokenizer's pattern); remembered per character."""
    k = _CLASS_OF.get(c)
    if k is None:
        if c in _WHITESPACE:
            k = "s"
        else:
            cat = unicodedata.category(c)[0]
            k = cat if cat in ("L", "N") else "o"
        _CLASS_OF[c] = k
    return k


def gpt2_split(text):
    """GPT-2's pre-tokenizer pattern, alternatives tried in this order at each position:
    's 't 're 've 'm 'll 'd | ' '?letters | ' '?numbers | ' '?other | whitespace not followed
    by a non-space | whitespace. A run of whitespace before a word leaves its last space to
    the word (" word"); a run at the end of the text stays whole."""
    out, i, n = [], 0, len(text)
    cls = [_char_class(c) for c in text]
    while i < n:
        c = text[i]
        if c == "'":
            hit = next((s for s in _CONTRACTIONS if text.startswith(s, i + 1)), None)
            if hit:
                out.append(text[i:i + 1 + len(hit)])
                i += 1 + len(hit)
                continue
        start = i + 1 if c == " " and i + 1 < n and cls[i + 1] != "s" else i
        k = cls[start]
        if k != "s":  # a letter, number or other run, with the space before it
            j = start + 1
            while j < n and cls[j] == k:
                j += 1
            out.append(text[i:j])
            i = j
            continue
        j = i + 1
        while j < n and cls[j] == "s":
            j += 1
        if j < n and j - i > 1:
            j -= 1  # the last space goes with what follows
        out.append(text[i:j])
        i = j
    return out


def smollm_split(text):
    """SmolLM2's pre-tokenizer: every digit is a piece of its own, then GPT-2's pattern
    splits the text between the digits."""
    out, start = [], 0
    for i, c in enumerate(text):
        if _char_class(c) == "N":
            if start < i:
                out += gpt2_split(text[start:i])
            out.append(c)
            start = i + 1
    if start < len(text):
        out += gpt2_split(text[start:])
    return out


PRE_TOKENIZERS = {"smollm": smollm_split, "gpt2": gpt2_split, "default": gpt2_split}


class Tokenizer:
    """encode(text) -> ids and decode(ids) -> text for a GGUF vocabulary; bos_id, eos_ids
    (every token that ends a turn), add_bos, and chat(user_text) for the model's turn format."""

    def __init__(self, model, tokens, types, merges=None, scores=None, pre=None, bos_id=None, eos_id=None,
                 unk_id=None, add_bos=False, add_space_prefix=False, chat_template=None):
        if model not in ("gpt2", "llama"):
            raise ValueError(f"tokenizer model {model!r} is not supported (supported: 'gpt2' byte-level BPE, "
                             "'llama' SentencePiece BPE)")
        self.model = model
        self.tokens = list(tokens)
        self.types = list(types) if types is not None else [NORMAL] * len(self.tokens)
        self.vocab = {}
        for i, t in enumerate(self.tokens):
            self.vocab.setdefault(t, i)
        self.bos_id, self.unk_id = bos_id, unk_id
        self.add_bos = bool(add_bos)
        self.add_space_prefix = bool(add_space_prefix)
        self.chat_template = chat_template
        if model == "gpt2":
            pre = pre or "default"
            if pre not in PRE_TOKENIZERS:
                raise ValueError(f"byte-level BPE pre-tokenizer {pre!r} is not supported "
                                 f"(supported: {', '.join(sorted(PRE_TOKENIZERS))})")
            if merges is None:
                raise ValueError("a byte-level BPE tokenizer needs tokenizer.ggml.merges")
            self._split = PRE_TOKENIZERS[pre]
            self._ranks = {}
            for r, m in enumerate(merges):
                a, _, b = m.partition(" ")
                self._ranks.setdefault((a, b), r)
            self._bpe_cache = {}
        else:
            if scores is None:
                raise ValueError("a SentencePiece tokenizer needs tokenizer.ggml.scores")
            self.scores = list(scores)
            # merges may only produce ordinary pieces: control and user-defined tokens are
            # matched whole, never assembled from characters
            self._mergeable = {t: i for t, i in self.vocab.items() if self.types[i] == NORMAL}
            self._byte_ids = {}
            for i, t in enumerate(self.tokens):
                if self.types[i] == BYTE:
                    m = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", t)
                    if m:
                        self._byte_ids[int(m.group(1), 16)] = i
        # tokens matched whole before the algorithm runs, longest first so that a token
        # containing another wins
        whole = [(t, i) for i, t in enumerate(self.tokens) if self.types[i] in (CONTROL, USER_DEFINED) and t]
        whole.sort(key=lambda x: -len(x[0]))
        self._control = [x for x in whole if self.types[x[1]] == CONTROL]
        self._user = [x for x in whole if self.types[x[1]] == USER_DEFINED]
        self._whole_re = {}
        # the tokens that end a turn: the file's eos, and the chat formats' end-of-turn tokens
        ends = [eos_id] if eos_id is not None else []
        for name in ("<|im_end|>", "<end_of_turn>", "<|endoftext|>", "<|eot_id|>", "<eos>"):
            i = self.vocab.get(name)
            if i is not None and self.types[i] == CONTROL and i not in ends:
                ends.append(i)
        self.eos_ids = ends

    @property
    def vocab_size(self):
        return len(self.tokens)

    # ---- encode ------------------------------------------------------------------------

    def encode(self, text, add_bos=None, special=True):
        """Token ids of text. add_bos: prepend the BOS token (default: as the file says);
        special: match control tokens written in the text (<|im_start|>, <start_of_turn>)."""
        if not isinstance(text, str):
            raise TypeError(f"encode: text must be a str, got {type(text).__name__}")
        ids = []
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids.append(self.bos_id)
        first = True
        for piece, tok in self._partition(text, special):
            if tok is not None:
                ids.append(tok)
            elif self.model == "gpt2":
                ids += self._encode_bpe(piece)
            else:
                ids += self._encode_spm(piece, first)
            first = False
        return ids

    def _partition(self, text, special):
        """(fragment, None) and (token text, id) pairs in text order."""
        whole = (self._control if special else []) + self._user
        if not whole:
            if text:
                yield text, None
            return
        key = bool(special)
        rx = self._whole_re.get(key)
        if rx is None:
            whole.sort(key=lambda x: -len(x[0]))
            rx = self._whole_re[key] = (re.compile("|".join(re.escape(t) for t, _ in whole)),
                                        {t: i for t, i in reversed(whole)})
        pattern, ids = rx
        pos = 0
        for m in pattern.finditer(text):
            if m.start() > pos:
                yield text[pos:m.start()], None
            yield m.group(), ids[m.group()]
            pos = m.end()
        if pos < len(text):
            yield text[pos:], None

    def _encode_bpe(self, text):
        ids = []
        for piece in self._split(text):
            got = self._bpe_cache.get(piece)
            if got is None:
                got = self._bpe_word("".join(BYTE_TO_CHAR[b] for b in piece.encode("utf-8")))
                if len(self._bpe_cache) < 100000:
                    self._bpe_cache[piece] = got
            ids += got
        return ids

    def _bpe_word(self, word):
        """Merge the lowest-ranked adjacent pair, every occurrence left to right, until no
        pair of the word has a merge."""
        syms = list(word)
        ranks = self._ranks
        while len(syms) > 1:
            best, rank = None, None
            for pair in zip(syms, syms[1:]):
                r = ranks.get(pair)
                if r is not None and (rank is None or r < rank):
                    best, rank = pair, r
            if best is None:
                break
            a, b = best
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        ids = []
        for s in syms:
            i = self.vocab.get(s)
            if i is None:  # cannot happen with a complete byte alphabet; keep going anyway
                ids += [self.vocab.get(c, self.unk_id) for c in s]
            else:
                ids.append(i)
        return [i for i in ids if i is not None]

    def _encode_spm(self, text, first):
        if self.add_space_prefix and first:
            text = " " + text
        text = text.replace(" ", SPM_SPACE)
        n = len(text)
        if n == 0:
            return []
        # symbols as a doubly linked list over [start, end) spans of text
        start = list(range(n))
        end = list(range(1, n + 1))
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        alive = [True] * n
        heap = []
        merged_from = {}
        vocab, scores = self._mergeable, self.scores

        def push(left):
            right = nxt[left]
            if right < 0:
                return
            piece = text[start[left]:end[right]]
            tok = vocab.get(piece)
            if tok is not None:
                # highest score first; on a tie the leftmost pair
                heapq.heappush(heap, (-scores[tok], left, end[right] - start[left], right))

        for i in range(n - 1):
            push(i)
        while heap:
            _, left, size, right = heapq.heappop(heap)
            if not (alive[left] and alive[right]) or nxt[left] != right or end[right] - start[left] != size:
                continue  # a stale pair: one side was merged into something else since
            merged_from[text[start[left]:end[right]]] = (text[start[left]:end[left]], text[start[right]:end[right]])
            end[left] = end[right]
            alive[right] = False
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            if prev[left] >= 0:
                push(prev[left])
            push(left)
        ids = []
        i = 0
        while i >= 0:
            self._spm_emit(text[start[i]:end[i]], merged_from, ids)
            i = nxt[i]
        return ids

    def _spm_emit(self, piece, merged_from, ids):
        tok = self.vocab.get(piece)
        if tok is not None and self.types[tok] in (NORMAL, USER_DEFINED):
            ids.append(tok)
        elif piece in merged_from:
            a, b = merged_from[piece]
            self._spm_emit(a, merged_from, ids)
            self._spm_emit(b, merged_from, ids)
        else:
            for byte in piece.encode("utf-8"):
                tok = self._byte_ids.get(byte, self.unk_id)
                if tok is not None:
                    ids.append(tok)

    # ---- decode ------------------------------------------------------------------------

    def decode(self, ids, skip_special=False):
        """The text of ids (bytes that do not form UTF-8 become U+FFFD). skip_special leaves
        out control tokens such as <|im_end|>."""
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")

    def decode_bytes(self, ids, skip_special=False):
        out = bytearray()
        n = len(self.tokens)
        for i in ids:
            i = int(i)
            if not 0 <= i < n:
                raise ValueError(f"decode: token id {i} is outside the vocabulary [0, {n})")
            t, ty = self.tokens[i], self.types[i]
            if ty == CONTROL:
                if not skip_special:
                    out += t.encode("utf-8")
            elif self.model == "gpt2":
                if ty == USER_DEFINED:
                    out += t.encode("utf-8")
                else:
                    out += bytes(CHAR_TO_BYTE[c] if c in CHAR_TO_BYTE else 0x3F for c in t)
            elif ty == BYTE:
                out.append(int(t[3:5], 16))
            else:
                out += t.replace(SPM_SPACE, " ").encode("utf-8")
        if self.model == "llama" and self.add_space_prefix and out[:1] == b" ":
            del out[:1]
        return bytes(out)

    # ---- chat --------------------------------------------------------------------------

    def chat_format(self):
        """'chatml', 'gemma' or None: the turn format the vocabulary and template support."""
        if "<|im_start|>" in self.vocab and "<|im_end|>" in self.vocab:
            return "chatml"
        if "<start_of_turn>" in self.vocab and "<end_of_turn>" in self.vocab:
            return "gemma"
        return None

    def chat(self, user_text, system=None):
        """The prompt text of one user turn followed by the start of the model's answer, in
        the model's turn format (ChatML, Gemma's turns), or user_text itself without one.
        ChatML's default system message is taken from the file's chat template, as the
        template inserts it when the conversation has none."""
        fmt = self.chat_format()
        if fmt == "chatml":
            if system is None and self.chat_template:
                m = re.search(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", self.chat_template, re.S)
                system = m.group(1) if m else None
            head = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
            return f"{head}<|im_start|>user\n{user_text}<|im_end|>\n<|im_start|>assistant\n"
        if fmt == "gemma":
            # Gemma has no system role: a system text goes at the top of the user turn
            body = f"{system}\n\n{user_text}" if system else user_text
            return f"<start_of_turn>user\n{body}<end_of_turn>\n<start_of_turn>model\n"
        return user_text


def from_gguf_fields(get):
    """A Tokenizer from a GGUF reader's metadata; get(key, default) reads one field."""
    model = get("tokenizer.ggml.model")
    if model is None:
        raise ValueError("the file has no tokenizer (tokenizer.ggml.model is missing)")
    return Tokenizer(model, get("tokenizer.ggml.tokens"), get("tokenizer.ggml.token_type"),
                     merges=get("tokenizer.ggml.merges"), scores=get("tokenizer.ggml.scores"),
                     pre=get("tokenizer.ggml.pre"), bos_id=get("tokenizer.ggml.bos_token_id"),
                     eos_id=get("tokenizer.ggml.eos_token_id"), unk_id=get("tokenizer.ggml.unknown_token_id"),
                     add_bos=get("tokenizer.ggml.add_bos_token", model == "llama"),
                     add_space_prefix=get("tokenizer.ggml.add_space_prefix", False),
                     chat_template=get("tokenizer.chat_template"))
