"""BridgeTower (Xu et al. 2023): a grounded caption-and-image model and a masked-LM model, from transformers.

    encoder = build({"adapter": "bridgetower", "model_id": "BridgeTower/bridgetower-base-itm-mlm",
                     "revision": "<commit>", "tokenizer": "BridgeTower/bridgetower-base-itm-mlm"})
    encoder.embed(captions, regions, "S")                       # regions entries carry ``image`` (pixels)
    encoder.mask_logprobs(["The woman is carrying a [MASK]."], [visual])   # BridgeTowerForMaskedLM's head

Config entry (``adapter: bridgetower``): the keys of vlbias.models.vl (weights: random + seed + config,
checkpoint, path, or model_id + revision; tokenizer, max_length, token_mask, ws_vector, batch_size,
device, threads). The model is transformers' ``BridgeTowerForMaskedLM`` (the published
``BridgeTower/bridgetower-base-itm-mlm`` is one; its image-text matching head ``itm_score``, which
nothing here reads, is dropped: its schema's ``family: weights: unused``); the grounded vectors read
its ``BridgeTowerModel`` (``.bridgetower``), the masked-LM probabilities its ``mlm_score`` head, as
``BridgeTowerForMaskedLM.forward`` does. ``config`` overrides BridgeTowerConfig. The image processor
is the model directory's (``preprocessor_config.json``), else BridgeTowerImageProcessor's defaults
(bridgetower-base's: shorter side 288 then a centre crop to a square, CLIP's mean and std) at the
vision config's ``image_size``.

The tokenizer is RoBERTa's byte-level BPE (BridgeTower's text encoder is RoBERTa), not the
bert-base-uncased WordPiece of the other families: ``tokenizer`` is the model's own (its hub id, or a
directory), and the default is the published model's id. A word's pieces depend on the space before
it ("Ġpurse" after a space): the MLM study spells an entity as it stands in its templates, after a
space (vlbias.suites.mlm.probability). The [MASK] a caller writes is read as the tokenizer's
``<mask>`` (which, as roberta-base's, takes the space before it).

Two streams: RoBERTa's layers and a CLIP ViT's run side by side, and the last of them feed, through
BridgeTower's bridge layers, a cross-modal text stream and a cross-modal image stream that attend to
each other:

    text stream   <s> caption </s> <pad>..    (BridgeTowerModel's ``text_features``)
    image stream  [CLS_I] patch_1 .. patch_P  (``image_features``)

    W, S  the text stream's first state (<s>): what its text pooler reads (the text half of
          ``pooler_output``, the input of its image-text matching head); ``ws_vector:
          language+visual`` appends the image stream's first state (the image pooler's input)
    C     the text stream's state of the word's first piece
    T     the text mask switches of vlbias.models.vl (``token_mask: piece | word``), with <mask>
    I     this project's extension for models that see pixels (vlbias.models.pixels): the regions mask
          I selects painted with the processor's mean colour before it runs. BridgeTower pre-trained on
          whole images, never masked regions: this is not the paper's mask I.
Every grounded pair needs its image.

Image-only work once per (image, mask): BridgeTowerModel.forward runs the CLIP ViT's layers on the image
alone, and each cross-modal layer's image input (the ViT layer's output after its ``ln_post``, projected by
``cross_modal_image_transform``) depends on the image alone until the image stream meets the text. That
work is computed once however many captions, batches and calls read the image (vlbias.models.vl
``_once``) and handed to transformers' forward in place of the ViT layers (their ``ln_post`` and the
projection made the identity); the vectors are bit-identical to the per-caption path
(tests/models/test_image_once.py). An image of fewer tokens than vlbias.models.vl.MIN_ROWS runs beside
copies of itself, as a batch of it would: a smaller matmul sums in another order on CPU.

Masked-LM probabilities (vlbias.suites.mlm, Srinivasan & Bisk): ``mlm_score`` on the text stream,
with the image (lp_VL(E | g, I)). BridgeTower has no text-only input (its masked-LM pre-training is
on image-caption pairs), so "no image" (lp_VL(E | g, -)) is, with ``no_image: masked`` (the default),
a blank image whose tokens the text stream's cross-attention does not read: its output is zero, the
attention over no token, and the text stream is RoBERTa's layers and the cross-modal layers' self-attention
and feed-forward alone (masking the image tokens would not do it: a softmax over keys all masked spreads
evenly over them); with ``no_image: blank``, the blank image read as any image: every pixel the processor's
mean colour, which its normalisation maps to (nearly) zero, at the square ``image_size``.
"""

import contextlib

import torch
from torch import nn
from transformers import BridgeTowerConfig, BridgeTowerForMaskedLM, BridgeTowerImageProcessor

from vlbias.errors import InputError
from vlbias.models import register
from vlbias.models.pixel_mlm import PixelMaskedLM, hooked
from vlbias.models.tokenization import encode_text
from vlbias.models.vl import LENGTH_BUCKET, MIN_ROWS, Given, replaced


@register("bridgetower")
class BridgeTowerEncoder(PixelMaskedLM):
    family = "bridgetower"
    name = "BridgeTower"
    config_class = BridgeTowerConfig
    model_class = BridgeTowerForMaskedLM
    processor_class = BridgeTowerImageProcessor
    blind_text = "which the text's cross-attention does not read"
    base_config = {}
    feature_dim_key = None

    def __init__(self, spec):
        super().__init__(spec)
        config = self.model.config
        # the cross-modal streams' width, which the vectors and mlm_score have (the text encoder's may differ)
        self.dim = self.info["dim"] = int(config.hidden_size)
        self.info["output"] = ("BridgeTowerModel's cross-modal text stream (text_features); W/S: its first state <s>"
                               + (" + the image stream's first state" if self.ws_vector == "language+visual" else "")
                               + ", C: first piece of the word")
        self.info["mlm_heads"] = {"no image": f"mlm_score given {self.no_image}", "image": "mlm_score given the image"}
        # RoBERTa's positions start after its padding index: that many fewer tokens fit
        positions = int(config.text_config.max_position_embeddings) - int(config.text_config.pad_token_id) - 1
        if self.max_length > positions:
            if spec.get("max_length"):
                raise InputError(f"max_length {self.max_length}", f"must be at most {positions}, the model's "
                                                                   "position embeddings")
            self.max_length = self.info["max_length"] = positions

    def _text_config(self, config):
        return config.text_config

    def _visual_dim(self, config):
        return int(config.hidden_size)

    @staticmethod
    def _image_size(config):
        return int(config.vision_config.image_size)

    @staticmethod
    def _patch_size(config):
        return int(config.vision_config.patch_size)

    @staticmethod
    def _default_processor(config):
        # bridgetower-base's processing (BridgeTowerImageProcessor's defaults) at the model's image size
        size = int(config.vision_config.image_size)
        return BridgeTowerImageProcessor(size={"shortest_edge": size}, crop_size={"shortest_edge": size},
                                         size_divisor=int(config.vision_config.patch_size))

    def _captions(self, captions):
        # the [MASK] the MLM study writes is RoBERTa's <mask>
        return [c.replace("[MASK]", self.tokenizer.mask_token) for c in captions]

    def _lengths(self, captions):
        return super()._lengths(self._captions(captions))  # their token counts as _batch reads them

    def _batch(self, captions, regions, index, mask, mask_terms, words):
        """(TextBatch, per caption its image's work (``_image_work``), each (image, mask) computed once
        (``_once``) however many captions, batches and calls read it; a None entry reads the blank image;
        blind (b,), PixelMaskedLM._blind)."""
        text = encode_text(self.tokenizer, self._captions(captions), self.max_length, mask_terms, words,
                           self.token_mask, LENGTH_BUCKET)
        images = []
        for i, entry in zip(index, regions):
            entry, seen = (self.blank, None) if entry is None else (entry, mask)  # the blank image is never masked
            images.append(self._once(entry, seen, lambda entry=entry, i=i, seen=seen: self._image_work(entry, i, seen)))
        text.input_ids = text.input_ids.to(self.device)
        text.attention_mask = text.attention_mask.to(self.device)
        return text, images, self._blind(regions)

    def _split(self):
        """The text layers BridgeTowerModel.forward runs before its first cross-modal layer (its split_index)."""
        model = self.model.bridgetower
        return len(model.text_model.encoder.layer) - model.config.num_hidden_layers + 1

    def _image_work(self, entry, index, mask):
        """One image's input to each cross-modal layer as BridgeTowerModel.forward computes it before the text
        meets it: per layer the ViT layer's output after ``forward_post`` (its ln_post), projected by the
        layer's ``cross_modal_image_transform``, sequence first (P, 1, hidden) as a ViT layer hands it on."""
        model = self.model.bridgetower
        visual, dtype = model.vision_model.visual, model.vision_model.dtype
        pixels = self.processor(images=[self._image(entry, index, mask)], return_tensors="pt")["pixel_values"]
        patch = self._patch_size(model.config)
        tokens = (pixels.shape[-2] // patch) * (pixels.shape[-1] // patch) + 1
        pixels = pixels.repeat(-(-MIN_ROWS // tokens), 1, 1, 1)  # copies: each matmul has MIN_ROWS rows or more
        blocks, split = visual.transformer.resblocks, self._split()
        states = visual.forward_pre(pixels.to(self.device).type(dtype))
        for block in blocks[:split]:
            states = block(states)
        work = [model._apply_image_transform(visual.forward_post(states.type(dtype)), 0)]
        for k, i in enumerate(range(split, len(model.text_model.encoder.layer))):
            states = blocks[i](states).type(dtype)
            work.append(model._apply_image_transform(visual.forward_post(states), k + 1))
        return [w[:1].permute(1, 0, 2) for w in work]

    def _states(self, text, images, blind):
        """(the text stream's states (b, L, dim), the W/S vectors (b, output_dim("S"))): BridgeTowerModel's
        last cross-modal layer, each caption's image work (``_image_work``) as computed ahead; a ``blind``
        caption's cross-attention reading nothing (its output zero)."""
        model = self.model.bridgetower
        visual = model.vision_model.visual
        # the ViT layer before cross-modal layer k gives its work; ln_post and the projection pass it on
        given = [nn.Identity() for _ in visual.transformer.resblocks]
        for k in range(len(images[0])):
            given[self._split() - 1 + k] = Given([work[k] for work in images], dim=1)
        transform = (nn.Identity() if model.config.share_cross_modal_transformer_layers else
                     nn.ModuleList(nn.Identity() for _ in model.cross_modal_image_transform))
        with contextlib.ExitStack() as stack:
            stack.enter_context(replaced(visual.transformer, resblocks=nn.ModuleList(given)))
            stack.enter_context(replaced(visual, ln_post=nn.Identity()))
            stack.enter_context(replaced(model, cross_modal_image_transform=transform))
            for layer in model.cross_modal_text_layers:
                stack.enter_context(hooked(layer.crossattention.self, lambda module, args, output: (
                    torch.where(blind[:, None, None], 0, output[0]), *output[1:])))
            # no pixels: the ViT's embeddings are not run, its layers read this placeholder and return their work
            out = model(input_ids=text.input_ids, attention_mask=text.attention_mask,
                        image_embeds=images[0][0].new_zeros((len(images), 1, 1)))
        first = out.text_features[:, 0]
        if self.ws_vector == "language+visual":
            first = torch.cat([first, out.image_features[:, 0]], dim=-1)
        return out.text_features, first

    def _lm_head(self, states):
        return self.model.mlm_score(states)
