"""ViLT (Kim et al. 2021): a grounded caption-and-image model and a masked-LM model, from transformers.

    encoder = build({"adapter": "vilt", "model_id": "dandelin/vilt-b32-mlm", "revision": "<commit>"})
    encoder.embed(captions, regions, "S")                       # regions entries carry ``image`` (pixels)
    encoder.mask_logprobs(["The woman is carrying a [MASK]."], [visual])   # ViltForMaskedLM's head

Config entry (``adapter: vilt``): the keys of vlbias.models.vl (weights: random + seed + config,
checkpoint, path, or model_id + revision; tokenizer, max_length, token_mask, batch_size, device,
threads). The model is transformers' ``ViltForMaskedLM`` (the published ``dandelin/vilt-b32-mlm``,
ViLT's pre-trained MLM+ITM model, is one); the grounded vectors read its ``ViltModel`` (``.vilt``),
the masked-LM probabilities its ``mlm_score`` head, as ``ViltForMaskedLM.forward`` does. ``config``
overrides ViltConfig. The image processor is the model directory's (``preprocessor_config.json``),
else ViltImageProcessor's defaults (vilt-b32-mlm's: shorter side 384, mean and std 0.5) with the
shorter side at the config's ``image_size`` and sizes multiples of its ``patch_size``. The caption
tokenizer is bert-base-uncased's WordPiece, ViLT's own; captions are at most 40 tokens (ViLT's
position embeddings, ``max_position_embeddings``).

One stream: ViltModel embeds the caption's tokens and the image's patches (each image at its own
aspect ratio, its position embeddings interpolated; the patches of a smaller image padded to the
batch's largest are masked out) and runs one transformer over

    [CLS] caption [SEP] [PAD]..  [CLS_I] patch_1 .. patch_P [pad patches]..
    0 ..................... L-1  L ..

    W, S  the state of [CLS] (index 0): what ViLT's pooler, and so its image-text matching head, reads
    C     the state of the word's first sub-token at its position (the caption comes first)
    T     the text mask switches of vlbias.models.vl (``token_mask: piece | word``)
    I     this project's extension for models that see pixels (vlbias.models.pixels): the regions mask
          I selects painted with the processor's mean colour before it runs. ViLT pre-trained on
          whole images, never masked regions: this is not the paper's mask I.
Every grounded pair needs its image. ``max_image_length`` (a cap on the patches read, which ViLT
meets by drawing patches at random) is set to -1: every patch, so that a vector is reproducible
(``info["max_image_length"]`` records the checkpoint's value); ViltModel shuffles the patches it
keeps, which moves a vector by float rounding only and would make it depend on its place in its batch:
they are kept in order instead (``patches_in_order``), so that a vector is bit-reproducible.

Masked-LM probabilities (vlbias.suites.mlm, Srinivasan & Bisk): ``mlm_score`` on the caption's
states, with its image (lp_VL(E | g, I) of S_L and S_V). ViLT has no text-only input (it pre-trained
on image-caption pairs only), so "no image" (lp_VL(E | g, -) of S_PT, S_V and B_L) is, with
``no_image: masked`` (the default), a blank image whose tokens are masked out of the attention: the
caption's tokens attend to the caption alone, as ViLT's layers run on the caption's tokens by themselves
would (the closest to the paper's removed visual input its single stream allows; docs/pixel-mlm.md);
with ``no_image: blank``, the blank image read as any image: every pixel the processor's mean colour,
which its normalisation maps to (nearly) zero, at the config's square ``image_size``.
"""

from contextlib import contextmanager

import torch
from transformers import ViltConfig, ViltForMaskedLM, ViltImageProcessor

from vlbias.models import register
from vlbias.models.pixel_mlm import PixelMaskedLM, hooked

@register("vilt")
class ViltEncoder(PixelMaskedLM):
    family = "vilt"
    name = "ViLT"
    config_class = ViltConfig
    model_class = ViltForMaskedLM
    processor_class = ViltImageProcessor
    blind_text = "its tokens masked out of the attention"
    base_config = {}
    feature_dim_key = None

    def __init__(self, spec):
        super().__init__(spec)
        config = self.model.config
        self.info["max_image_length"] = {"checkpoint": config.max_image_length, "used": -1}
        config.max_image_length = -1  # every patch: a cap draws patches at random (ViltEmbeddings.visual_embed)
        self.info["output"] = ("ViltModel's states (caption tokens, then image patches); W/S: [CLS] (index 0), "
                               "C: first sub-token of the word")
        self.info["mlm_heads"] = {"no image": f"mlm_score given {self.no_image}", "image": "mlm_score given the image"}

    @staticmethod
    def _image_size(config):
        return int(config.image_size)

    @staticmethod
    def _default_processor(config):
        # vilt-b32-mlm's processing (ViltImageProcessor's defaults) at the model's image and patch size
        return ViltImageProcessor(size={"shortest_edge": int(config.image_size)}, size_divisor=int(config.patch_size))

    @staticmethod
    def _patch_size(config):
        return int(config.patch_size)

    def _states(self, text, pixel_values, pixel_mask, blind):
        """(the caption's states (b, L, dim), [CLS]'s state (b, dim)): ViltModel's last layer; a ``blind``
        caption's image tokens out of the attention (ViltEmbeddings' mask of them zero)."""
        def unseen(module, args, output):
            embeddings, masks = output
            return embeddings, torch.where(blind[:, None], masks * (torch.arange(masks.shape[1], device=masks.device)
                                                                    < text.input_ids.shape[1]), masks)

        # the padding patches a smaller image draws are masked (any draw gives the same vectors): a fixed seed
        # keeps even their choice reproducible, the caller's RNG untouched
        with torch.random.fork_rng(devices=[]), patches_in_order(), hooked(self.model.vilt.embeddings, unseen):
            torch.manual_seed(0)
            states = self.model.vilt(input_ids=text.input_ids, attention_mask=text.attention_mask,
                                     pixel_values=pixel_values, pixel_mask=pixel_mask).last_hidden_state
        return states[:, :text.input_ids.shape[1]], states[:, 0]

    def _lm_head(self, states):
        return self.model.mlm_score(states)


@contextmanager
def patches_in_order():
    """ViltEmbeddings.visual_embed keeps every patch of an image (max_image_length -1) but draws their
    order, torch.multinomial over equal weights taking all of them: attention is blind to the order (each
    patch keeps its position embedding), the float sums are not, and draws made pair after pair would make
    a vector depend on its place in its batch. Within the block such a draw is the patches in order; any
    other draw (with replacement, or fewer than all) is torch's."""
    draw = torch.multinomial

    def in_order(weights, num_samples, replacement=False, **kwargs):
        if not replacement and num_samples == weights.numel():
            return torch.arange(num_samples, device=weights.device)
        return draw(weights, num_samples, replacement, **kwargs)

    torch.multinomial = in_order
    try:
        yield
    finally:
        torch.multinomial = draw
