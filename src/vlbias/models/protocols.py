"""The encoder contract: what a model adapter offers the suites, one ``typing.Protocol`` per role.

Which roles a family plays is what its schema file declares (``family:`` in
vlbias/schemas/models/<adapter>.yaml, read by vlbias.models.families without importing the adapter):

    embeds: [images]          ImageEncoder            (iEAT: SimCLRv2, iGPT, open_clip, hf_dual)
    embeds: [texts]           TextEncoder             (SEAT: sentence; the text towers of dual encoders)
    outputs: {...}            MultiOutputImageEncoder (iGPT: several layers and the logits from one pass)
    no embeds                 VisionLanguageEncoder   (grounded: (caption, regions) pairs; vlbias.models.vl)
    no embeds, mlm_head not false   MaskedLM          (the MLM study)

``roles`` maps a declaration to its protocols. tests/models/test_protocols.py checks every adapter class in
the registry against the protocols its schema declares (method parameters by name, kind and
default; attributes set), and mypy (``[tool.mypy]`` in pyproject.toml) checks this module and the
static assignments there. An adapter may give a method more parameters, each with a default.
"""

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, TypeAlias

import numpy as np
from numpy.typing import NDArray

Pixels: TypeAlias = NDArray[np.uint8]
"""uint8 (n, H, W, 3): square RGB images."""
Vectors: TypeAlias = NDArray[np.float32]
"""float32 (n, dim): one vector per input, in order."""
Level: TypeAlias = Literal["W", "S", "C"]
"""Ross et al.'s embeddings: a single word's [CLS] state (W), a sentence's (S), a word in context (C)."""
Mask: TypeAlias = Literal["T", "I"] | None
"""Experiment 3's masks: the terms in the caption (T), the person regions (I), none."""
RegionEntry: TypeAlias = Any
"""One caption's regions: a vlbias.models.vl.Visual, or a mapping or object with its fields
(``features``, ``boxes_norm``, ``is_person``, and ``image_size``, ``image`` for the families that read
them); None in a list of them is "no visual input"."""
Word: TypeAlias = str | tuple[int, int]
"""Level C's word: the word (its first whole-word occurrence) or a (start, end) character span."""


class Encoder(Protocol):
    """What every adapter has."""

    info: dict[str, Any]
    """JSON-able provenance: the adapter, where its weights came from (id, revision, commit, sha256),
    what it outputs, its dim, device and library versions; the embedding cache is keyed by it."""


class ImageEncoder(Encoder, Protocol):
    """``embeds: [images, ...]``: image embeddings for the iEAT."""

    dim: int

    def encode_images(self, pixels: Pixels) -> Vectors:
        """float32 (n, dim) vectors of uint8 (n, H, W, 3) square RGB images."""
        ...


class TextEncoder(Encoder, Protocol):
    """``embeds: [..., texts]``: text embeddings (SEAT; with images, one joint space: cross-modal tests)."""

    dim: int

    def encode_texts(self, texts: Sequence[str]) -> Vectors:
        """float32 (n, dim) vectors of n strings."""
        ...


class MultiOutputImageEncoder(Encoder, Protocol):
    """``outputs: {...}``: several vectors per image from one pass, one store each (iGPT's layers, logits)."""

    outputs: list[str]
    dims: dict[str, int]

    def encode_outputs(self, pixels: Pixels) -> dict[str, Vectors]:
        """{output name: float32 (n, dims[name])} of uint8 (n, H, W, 3) square RGB images."""
        ...


class VisionLanguageEncoder(Encoder, Protocol):
    """No ``embeds``: embeddings of (caption, regions) pairs for the grounded tests (vlbias.models.vl)."""

    dim: int
    batch_size: int
    token_mask: str
    """How mask T replaces a term: ``piece`` or ``word`` (protocol switch)."""
    ws_vector: str
    """The W/S vectors: ``language`` or ``language+visual`` (protocol switch)."""
    feed: dict[str, str]
    """{feed option: its value}: how the family's inputs are fed (its schema's ``feeds``)."""
    supports_image_masking: bool
    masks_every_run: bool
    """True: the regions mask I hides are masked in the unmasked runs too (the authors' ViLBERT)."""
    batch_dependent: bool
    """True: a pair's vector depends on its batch in the authors' loader (``in_authors_batches``)."""
    needs_pixels: bool
    """True: the entries carry ``image`` (the family computes region features itself)."""

    def output_dim(self, level: Level) -> int:
        """The size of the vectors ``embed`` returns at ``level``."""
        ...

    def embed(self, captions: Sequence[str], regions: Sequence[RegionEntry | None] | None, level: Level,
              mask: Mask = None, mask_terms: Sequence[str] | None = None,
              words: Sequence[Word] | None = None) -> Vectors:
        """float32 (n, output_dim(level)) embeddings of n (caption, regions) pairs; ``mask_terms`` exactly
        for mask T, ``words`` exactly for level C (vlbias.models.vl)."""
        ...

    def refusal(self, entry: RegionEntry | None) -> str | None:
        """Why the configured feed cannot read ``entry`` (the pair's missing.tsv reason), or None."""
        ...

    def in_authors_batches(self, captions: Sequence[str], regions: Sequence[RegionEntry | None]
                           ) -> tuple[list[RegionEntry | None], list[int | None]]:
        """(entries, cache keys) of one role's pairs in the authors' loader order: what a
        ``batch_dependent`` feed reads of each pair's batch; otherwise the entries and no keys."""
        ...


class Tokenizer(Protocol):
    """What the MLM study reads of a masked LM's tokenizer (a transformers WordPiece tokenizer)."""

    unk_token_id: int | None

    def tokenize(self, text: str) -> list[str]: ...

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]: ...

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]: ...


class MaskedLM(Encoder, Protocol):
    """No ``embeds`` and no ``mlm_head: false``: masked-word probabilities for the MLM study."""

    tokenizer: Tokenizer

    def mask_logprobs(self, captions: Sequence[str], regions: Sequence[RegionEntry | None] | None = None,
                      mask: Mask = None, mask_terms: Sequence[str] | None = None,
                      tokens: Sequence[str] | None = None,
                      fill: Sequence[Sequence[int]] | None = None) -> list[Vectors]:
        """Per caption float32 (m, V) log P(token | context) at its m [MASK]s (``tokens``: those columns
        only; ``fill``: ids written into the first [MASK]s first, which are then not returned)."""
        ...


def roles(family: Mapping[str, Any]) -> list[type]:
    """The protocols an adapter implements, from its schema's ``family`` declaration
    (vlbias.models.families.family)."""
    embeds = family.get("embeds") or []
    found: list[type] = []
    if "images" in embeds:
        found.append(ImageEncoder)
    if "texts" in embeds:
        found.append(TextEncoder)
    if family.get("outputs"):
        found.append(MultiOutputImageEncoder)
    if not embeds:
        found.append(VisionLanguageEncoder)
        if family.get("mlm_head") is not False:
            found.append(MaskedLM)
    return found
