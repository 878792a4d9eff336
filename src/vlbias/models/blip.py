"""BLIP (Li et al. 2022) as a grounded model: the image-grounded text encoder of its retrieval model.

Config entry (``adapter: blip``): the keys of vlbias.models.vl (``ws_vector`` language only: one
stream), and
    first_token   ``enc`` (default) or ``cls``: the caption's first token. BLIP's own image-text
                  matching (its pre-training, retrieval fine-tuning and ITM inference: the
                  ``encoder_input_ids[:, 0] = enc_token_id`` of BLIP's and LAVIS's code) puts its
                  [ENC] token there; transformers' ``BlipForImageTextRetrieval.forward`` feeds the
                  processor's ids as they are, [CLS] first (``cls`` reproduces that call exactly)
The published model: ``Salesforce/blip-itm-base-coco`` (the default; ViT-B/16 at 384 pixels);
its image processor is read from the model's ``preprocessor_config.json`` (``weights: random`` and
``checkpoint``: transformers' BlipImageProcessor at the vision config's image size). Random weights
initialise the vision model at std 0.02 (``vision_config: {initializer_range: ...}`` overrides it),
not transformers' 1e-10, with which a random model would ignore the image.

The model: ``BlipForImageTextRetrieval``'s ``forward(input_ids, pixel_values, use_itm_head=True,
attention_mask)``, as transformers runs it: the vision model's last hidden states (all patches and
its [CLS]), every one attended (a mask of ones), are the cross-attention input of each layer of the
text encoder, which reads the caption bidirectionally (its padding masked). Its output
(``question_embeds``) are the language states: W and S the first token's state (the one the ITM
head reads), C the first sub-token of the word in context.

Image-only work once per (image, mask): the vision model's states of an image, and each text layer's
cross-attention keys and values over them (they depend on the image alone), are computed once
however many captions read it (vlbias.models.vl ``_once``) and handed to transformers' text encoder
in place of its key and value projections; the vectors are bit-identical to the per-caption path
(tests/test_image_once.py).

Masks: T sets the terms to [MASK] (the token mask switches of vlbias.models.vl); BLIP never
trained with [MASK] (it has no masked-language objective), so the token is an input it reads
without a learned meaning. I, this project's extension (vlbias.models.pixels): BLIP reads pixels,
not regions, and was never pre-trained with masked regions; the boxes of the regions mask I
selects (the region store's, ``is_person``) are painted with the processor's mean colour before
the processor runs. BLIP's retrieval model has no masked-language head: ``mask_logprobs`` is an
InputError (the MLM suite does not apply). No visual input does not apply either: the
image-grounded encoder always reads an image.
"""

import contextlib

import numpy as np
import torch
from transformers import BlipConfig, BlipForImageTextRetrieval, BlipImageProcessor

from vlbias.errors import InputError
from vlbias.models import register
from vlbias.models.hf import load_model
from vlbias.models.pixels import fill_regions, mean_colour
from vlbias.models.tokenization import encode_text
from vlbias.models.vl import LENGTH_BUCKET, Given, VLEncoder, replaced
from vlbias.visual import visual_field

FIRST_TOKENS = ("enc", "cls")
# BLIP's tokenizer: bert-base-uncased with these two added (BLIP's init_tokenizer), ids 30522 and 30523
DECODER_TOKEN, ENCODER_TOKEN = "[DEC]", "[ENC]"


@register("blip")
class BlipEncoder(VLEncoder):
    family = "blip"
    config_class = BlipConfig
    model_class = BlipForImageTextRetrieval
    base_config = {}
    feature_dim_key = None  # no region features: the image's pixels
    needs_pixels = True
    supports_image_masking = True
    no_image = None
    # per image its states and every layer's cross-attention keys and values, 44 MB at base size: the 256 images
    # a job keeps for full calls (vlbias.models.vl) hold 11 GB

    def __init__(self, spec):
        self.first_token = spec["first_token"]
        if self.first_token not in FIRST_TOKENS:
            raise InputError(f"first_token '{self.first_token}'", f"must be one of {', '.join(FIRST_TOKENS)}")
        super().__init__(spec)
        vision = self.model.config.vision_config
        if self._model_dir is not None and (self._model_dir / "preprocessor_config.json").is_file():
            self.processor = BlipImageProcessor.from_pretrained(self._model_dir, local_files_only=True,
                                                                trust_remote_code=False)
        else:
            self.processor = BlipImageProcessor(size={"height": vision.image_size, "width": vision.image_size})
        self.fill = mean_colour(self.processor.image_mean)
        self.first_id = self.tokenizer.convert_tokens_to_ids(ENCODER_TOKEN if self.first_token == "enc"
                                                             else self.tokenizer.cls_token)
        self.image_masking = (f"pixel fill (this project's extension): the boxes of the masked regions painted "
                              f"RGB {self.fill.tolist()}, the processor's mean colour")
        self.info.update({
            "output": f"image-grounded text encoder (cross-attention over the vision model's patch states); "
                      f"W/S: the first token's state ({self.first_token_name}), C: first sub-token of the word",
            "first_token": self.first_token,
            "image_masking": self.image_masking,
            "needs_pixels": True,
            "mlm_head": False,
            "processor": {"size": dict(self.processor.size), "image_mean": list(self.processor.image_mean),
                          "image_std": list(self.processor.image_std), "resample": int(self.processor.resample)},
        })

    @property
    def first_token_name(self):
        return ENCODER_TOKEN if self.first_token == "enc" else self.tokenizer.cls_token

    # --- loading ------------------------------------------------------------------------------

    def _text_config(self, config):
        return config.text_config

    def _load_tokenizer(self, spec):
        """bert-base-uncased WordPiece with BLIP's [DEC] (bos) and [ENC] added, as BLIP's init_tokenizer
        adds them (a tokenizer that has them already, BLIP's own, is unchanged)."""
        tokenizer, sha = super()._load_tokenizer(spec)
        if DECODER_TOKEN not in tokenizer.get_vocab():
            tokenizer.add_special_tokens({"bos_token": DECODER_TOKEN})
        if ENCODER_TOKEN not in tokenizer.get_vocab():
            tokenizer.add_special_tokens({"additional_special_tokens": [ENCODER_TOKEN]})
        return tokenizer, sha

    def _load(self, spec):
        # a random model's vision tower at std 0.02, not 1e-10: vlbias.models.hf.RANDOM_BASE
        model, source, self._model_dir = load_model(spec, self.family, self.model_class, self.config_class,
                                                    self.base_config)
        return model, source

    # --- inputs -------------------------------------------------------------------------------

    def _pixels(self, entry, index, mask):
        """One entry's image (uint8 RGB), the boxes mask I selects painted with the mean colour."""
        where = f"regions[{index}]"
        if entry is None:
            raise InputError(where, "BLIP's image-grounded text encoder reads an image; 'no visual input' does "
                                    "not apply to it")
        image = visual_field(entry, "image")
        if image is None or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise InputError(where, "BLIP reads the image's pixels: it needs image, uint8 RGB (H, W, 3)")
        if mask != "I":
            return image
        boxes, person = visual_field(entry, "boxes_norm"), visual_field(entry, "is_person")
        if boxes is None or person is None:
            raise InputError(where, "image masking needs boxes_norm and is_person")
        return fill_regions(image, boxes, person, self.fill)

    def _batch(self, captions, regions, index, mask, mask_terms, words):
        """(TextBatch, per caption its image's work: (vision states (1, P, D), per text layer the
        cross-attention (keys, values) (1, P, H)))."""
        text = encode_text(self.tokenizer, captions, self.max_length, mask_terms, words, self.token_mask,
                           LENGTH_BUCKET)
        text.input_ids[:, 0] = self.first_id
        for tokens in text.tokens:
            tokens[0] = self.first_token_name
        images = [self._once(entry, mask, lambda entry=entry, i=i: self._image(entry, i, mask))
                  for i, entry in zip(index, regions)]
        text.input_ids = text.input_ids.to(self.device)
        text.attention_mask = text.attention_mask.to(self.device)
        return text, images

    def _image(self, entry, index, mask):
        """One image's vision states and each text layer's cross-attention keys and values over them."""
        pixels = self.processor(images=[self._pixels(entry, index, mask)], return_tensors="pt")["pixel_values"]
        states = self.model.vision_model(pixel_values=pixels.to(self.device)).last_hidden_state
        return states, [(layer.crossattention.self.key(states), layer.crossattention.self.value(states))
                        for layer in self.model.text_encoder.encoder.layer]

    def _shape(self, length, entry):
        return (self._bucket(length),), (self._bucket(length),)  # every image is the same number of patches

    # --- outputs ------------------------------------------------------------------------------

    def _language_states(self, text, images):
        """The text encoder's states with cross-attention over each caption's image (BlipForImageTextRetrieval
        with use_itm_head: its question_embeds), the image's keys and values as computed ahead."""
        image = torch.cat([states for states, _ in images])
        with contextlib.ExitStack() as stack:
            for i, layer in enumerate(self.model.text_encoder.encoder.layer):
                stack.enter_context(replaced(layer.crossattention.self, key=Given([kv[i][0] for _, kv in images]),
                                             value=Given([kv[i][1] for _, kv in images])))
            out = self.model.text_encoder(input_ids=text.input_ids, attention_mask=text.attention_mask,
                                          encoder_hidden_states=image,
                                          encoder_attention_mask=torch.ones(image.shape[:2], dtype=torch.long,
                                                                            device=image.device))
        return out.last_hidden_state

    def mask_logprobs(self, *args, **kwargs):
        raise InputError("blip", "BLIP's retrieval model (BlipForImageTextRetrieval) has no masked-language head: "
                                 "the masked-LM study does not apply to it")
