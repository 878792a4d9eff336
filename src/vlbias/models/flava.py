"""FLAVA (Singh et al. 2022): a grounded caption-and-image model and a masked-LM model, from transformers.

    encoder = build({"adapter": "flava", "model_id": "facebook/flava-full", "revision": "<commit>"})
    encoder.embed(captions, regions, "S")                       # regions entries carry ``image`` (pixels)
    encoder.mask_logprobs(["The woman is carrying a [MASK]."], [None])   # text only: the MLM head

Config entry (``adapter: flava``): the keys of vlbias.models.vl (weights: random + seed + config,
checkpoint, path, or model_id + revision; tokenizer, max_length, token_mask, batch_size, device,
threads). The model is transformers' ``FlavaForPreTraining`` (the published ``facebook/flava-full``
is one); the grounded vectors read its ``FlavaModel`` (``.flava``), the masked-LM probabilities
its heads. ``config`` overrides FlavaConfig (e.g. ``text_config: {hidden_size: 32}``); a random
model is built without the image codebook (``init_codebook: false``: the DALL-E tokenizer gives
masked-image targets only, which nothing here reads), and a checkpoint's ``image_codebook.*``
entries are dropped. The image processor is the model directory's (``preprocessor_config.json``),
else FlavaImageProcessor's defaults (flava-full's) at the config's image size. The caption
tokenizer is bert-base-uncased's WordPiece, FLAVA's own.

Grounded vectors (vlbias.suites.grounded). FlavaModel runs the image encoder on the pixels and the
text encoder on [CLS] caption [SEP]; their last layers (before their final LayerNorms) are
projected and concatenated, image first, and the multimodal encoder prepends its own [CLS]:

    [CLS_M]  [CLS_I] patch_1 .. patch_P  [CLS] caption [SEP] [PAD]..
    0        1 ..................... P+1  P+2 ..

    W, S  the multimodal [CLS_M] state (index 0): the token FLAVA's multimodal encoder adds for the
          pair (FlavaMultimodalModel's ``cls_token``), the one its image-text matching head pools
          and the paper's h_CLS,M for multimodal tasks; the text's own [CLS] (P+2) is a text token
          the encoder mixes with the image like any other. ``ws_vector`` is ``language`` only.
    C     the state of the word's first sub-token at its position in the multimodal sequence: the
          caption's tokens are the sequence's last, so its offset is the sequence length minus the
          caption's (1 + P + 1 for FLAVA, read from the states, not assumed)
    T     the text mask switches of vlbias.models.vl (``token_mask: piece | word``), on the text
          encoder's input; the multimodal encoder attends to the caption's attention mask
    I     this project's extension for models that see pixels (vlbias.models.pixels): the regions
          mask I selects (``is_person``, the region store's boxes) painted with the processor's
          mean colour, which its normalisation maps to zero, before the processor runs. FLAVA's
          pre-training masked image patches, not regions: this is not the paper's mask I.
A multimodal [CLS] is needed: a config with ``multimodal_config.use_cls_token: false`` is refused.
Every grounded pair needs its image: FLAVA has no region features to leave out.

Masked-LM probabilities (vlbias.suites.mlm, Srinivasan & Bisk), per caption by whether it has an image:
    no image    FLAVA's unimodal masked-language head ``mlm_head`` on the text encoder's output (after
                its final LayerNorm): FLAVA's text-only pre-training (MLM on text corpora); what
                FlavaForPreTraining returns as ``mlm_logits`` for ``input_ids_masked`` without pixels.
                This is lp_VL(E | g, -) of S_PT and S_V and B_L.
    an image    the masked-multimodal text head ``mmm_text_head`` on the multimodal encoder's states
                at the caption's positions, given the pixels (FLAVA's MMM pre-training); what
                FlavaForPreTraining returns as ``mmm_text_logits``. This is lp_VL(E | g, I) of S_L and S_V.
So S_V (image against no image) compares the two heads, as VL-BERT's compares its image input with
its text-only pre-training input; S_L and S_PT each read one head. The images are not masked.
``no_image: blank`` (default ``text``) reads "no image" instead as the multimodal encoder and
``mmm_text_head`` given a blank image (every pixel the processor's mean colour, which it normalises
to zero), so that S_V compares one head with and without the image's content; S_PT then compares
that head, not FLAVA's text-only one, with BERT.
"""

import numpy as np
import torch
from transformers import FlavaConfig, FlavaForPreTraining, FlavaImageProcessor

from vlbias.errors import InputError
from vlbias.models import register
from vlbias.models.hf import load_model
from vlbias.models.pixels import fill_regions, mean_colour
from vlbias.models.tokenization import encode_text
from vlbias.models.vl import LENGTH_BUCKET, VLEncoder
from vlbias.visual import Visual, visual_field

# what the image processor does to the pixels the model reads (the rest configures codebook targets)
PROCESSOR_KEYS = ("size", "crop_size", "do_resize", "do_center_crop", "resample", "do_rescale", "rescale_factor",
                  "do_normalize", "image_mean", "image_std")


@register("flava")
class FlavaEncoder(VLEncoder):
    family = "flava"
    config_class = FlavaConfig
    model_class = FlavaForPreTraining
    base_config = {"init_codebook": False}
    feature_dim_key = None
    needs_pixels = True
    supports_image_masking = True
    NO_IMAGE = {"text": "text only: the text encoder and its masked-language head (mlm_head), FLAVA's unimodal "
                        "text pre-training",
                "blank": "a blank image (the processor's mean colour) through the multimodal encoder and its "
                         "masked-multimodal text head (mmm_text_head)"}

    def __init__(self, spec):
        super().__init__(spec)
        config = self.model.config
        if not config.multimodal_config.use_cls_token:
            raise InputError("config multimodal_config.use_cls_token", "must be true: W and S are FLAVA's "
                                                                        "multimodal [CLS] state")
        self.dim = self.info["dim"] = int(config.multimodal_config.hidden_size)
        if self.dim != config.text_config.hidden_size:  # FlavaForPreTraining's mmm_text_head has the text width
            raise InputError("config multimodal_config.hidden_size", f"must equal text_config.hidden_size "
                                                                     f"({config.text_config.hidden_size})")
        self.fill = mean_colour(self.processor.image_mean)
        no_image = spec["no_image"]
        if no_image not in self.NO_IMAGE:
            raise InputError(f"no_image '{no_image}'", f"must be one of {', '.join(self.NO_IMAGE)}")
        self.no_image = self.NO_IMAGE[no_image]
        size = config.image_config.image_size
        # a caption without an image reads this one (blank), or none (text)
        self.blank = None if no_image == "text" else Visual(np.zeros((0, 0), np.float32), image_size=(size, size),
                                                            image=np.full((size, size, 3), self.fill, np.uint8))
        self.image_masking = (f"the regions' boxes painted with the processor's mean colour {self.fill.tolist()} "
                              "before it runs (this project's extension: vlbias.models.pixels)")
        self.info.update({
            "output": "multimodal encoder states; W/S: the multimodal [CLS] (index 0), C: first sub-token of the "
                      "word at its position after the image tokens",
            "image_masking": self.image_masking, "needs_pixels": True, "no_image": self.no_image,
            "mlm_heads": {"no image": "mlm_head on the text encoder" if self.blank is None else
                          "mmm_text_head on the multimodal encoder, a blank image",
                          "image": "mmm_text_head on the multimodal encoder"},
            "processor": {k: v for k, v in self.processor.to_dict().items() if k in PROCESSOR_KEYS},
        })

    def _text_config(self, config):
        return config.text_config

    def _load(self, spec):
        model, source, model_dir = load_model(spec, self.family, self.model_class, self.config_class,
                                              self.base_config, map_state=self._checkpoint_state)
        if model_dir is not None and (model_dir / "preprocessor_config.json").is_file():
            self.processor = FlavaImageProcessor.from_pretrained(model_dir, local_files_only=True,
                                                                 trust_remote_code=False)
        else:  # flava-full's processing at the model's image size
            size = model.config.image_config.image_size
            self.processor = FlavaImageProcessor(size={"height": size, "width": size},
                                                 crop_size={"height": size, "width": size})
        return model, source

    # --- inputs -------------------------------------------------------------------------------

    def embed(self, captions, regions, level, mask=None, mask_terms=None, words=None):
        if regions is None or any(r is None for r in regions):
            raise InputError("regions", "FLAVA's grounded vectors are its multimodal encoder's: every caption "
                                        "needs its image")
        return super().embed(captions, regions, level, mask, mask_terms, words)

    def _image(self, entry, index, mask):
        """The caption's image, uint8 RGB (H, W, 3), with mask I's regions filled."""
        image = visual_field(entry, "image")
        if image is None or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise InputError(f"regions[{index}]", "FLAVA reads the image's pixels: it needs image, uint8 RGB (H, W, 3)")
        if mask == "I":
            image = fill_regions(image, visual_field(entry, "boxes_norm"), visual_field(entry, "is_person"), self.fill)
        return image

    def _batch(self, captions, regions, index, mask, mask_terms, words):
        """(TextBatch, per caption its image's tokens as the multimodal encoder reads them (1, 1 + P, hidden),
        or None for none); each image's computed once (``_once``) however many captions read it."""
        text = encode_text(self.tokenizer, captions, self.max_length, mask_terms, words, self.token_mask,
                           LENGTH_BUCKET)
        images = []
        for i, entry in zip(index, regions):
            entry = self.blank if entry is None else entry
            images.append(None if entry is None else
                          self._once(entry, mask, lambda entry=entry, i=i: self._image_tokens(entry, i, mask)))
        text.input_ids = text.input_ids.to(self.device)
        text.attention_mask = text.attention_mask.to(self.device)
        return text, images

    def _shape(self, length, entry):
        # every image is the same number of patches; a caption without one is its text alone
        return (self._bucket(length), entry is None and self.blank is None), (self._bucket(length),)

    # --- outputs ------------------------------------------------------------------------------

    def _text(self, text):
        return self.model.flava.text_model(input_ids=text.input_ids, attention_mask=text.attention_mask,
                                           output_hidden_states=True)

    def _image_tokens(self, entry, index, mask):
        """One image as FlavaModel hands it to the multimodal encoder: the image encoder's last layer
        before its final LayerNorm, projected."""
        pixels = self.processor(images=[self._image(entry, index, mask)], return_tensors="pt")["pixel_values"]
        image = self.model.flava.image_model(pixel_values=pixels.to(self.device), output_hidden_states=True)
        return self.model.flava.image_to_mm_projection(image.hidden_states[-1])

    def _multimodal(self, text_states, attention_mask, images):
        """Multimodal encoder states (b, 1 + image tokens + L, hidden) of captions whose text encoder
        last layer is ``text_states`` (b, L, text hidden), each with its image's tokens (``_image_tokens``):
        FlavaModel.forward's fusion, image first."""
        flava = self.model.flava
        joint = torch.cat([torch.cat(images), flava.text_to_mm_projection(text_states)], dim=1)
        seen = attention_mask.new_ones(len(joint), joint.shape[1] - attention_mask.shape[1] + 1)  # [CLS_M], image
        return flava.multimodal_model(joint, attention_mask=torch.cat([seen, attention_mask], dim=1)).last_hidden_state

    def _level_vectors(self, text, visual, level):
        (images,) = visual
        states = self._multimodal(self._text(text).hidden_states[-1], text.attention_mask, images)
        rows = torch.arange(len(states), device=states.device)
        if level != "C":
            return states[rows, 0]  # the multimodal [CLS]
        offset = states.shape[1] - text.input_ids.shape[1]  # the caption's tokens come last
        return states[rows, offset + torch.from_numpy(text.positions).to(states.device)]

    def _mask_logits(self, text, visual, is_mask):
        (images,) = visual
        out, encoded = [None] * len(images), self._text(text)
        for j in (j for j, image in enumerate(images) if image is None):
            out[j] = self.model.mlm_head(encoded.last_hidden_state[j, is_mask[j]])
        shown = [j for j, image in enumerate(images) if image is not None]
        if shown:
            states = self._multimodal(encoded.hidden_states[-1][shown], text.attention_mask[shown],
                                      [images[j] for j in shown])[:, -text.input_ids.shape[1]:]  # the caption's
            for i, j in enumerate(shown):
                out[j] = self.model.mmm_text_head(states[i, is_mask[j]])
        return out
