"""What the masked-LM models that read pixels through one image processor (ViLT, BridgeTower) share.

A family (vlbias.models.vilt, vlbias.models.bridgetower) subclasses ``PixelMaskedLM``: mask I as the
pixel fill of vlbias.models.pixels, and "no image" (``no_image``) as the closest to no visual input the
model allows, neither having a text-only input: ``masked``, a blank image's tokens present but out of the
text's attention (the family's ``_states`` reads ``blind``, per caption whether it has no image), or
``blank``, a blank image of the processor's mean colour, read as any image. By default (ViLT) each distinct image of a batch is processed once
by the model's image processor (``pixel_values`` and ``pixel_mask``, padded to the batch's largest);
BridgeTower overrides ``_batch`` to hand its image work computed once per (image, mask). W/S, C and the
masked-LM logits are read from the states the family's ``_states`` gives. docs/pixel-mlm.md.
"""

from contextlib import contextmanager

import numpy as np
import torch

from vlbias.errors import InputError
from vlbias.models.hf import load_model
from vlbias.models.pixels import fill_regions, mean_colour
from vlbias.models.tokenization import encode_text
from vlbias.models.vl import LENGTH_BUCKET, VLEncoder
from vlbias.visual import Visual, visual_field

# what an image processor does to the pixels the model reads
PROCESSOR_KEYS = ("size", "size_divisor", "crop_size", "do_resize", "do_center_crop", "resample", "do_rescale",
                  "rescale_factor", "do_normalize", "image_mean", "image_std", "do_pad")


class PixelMaskedLM(VLEncoder):
    """What the one-processor pixel models (ViLT, BridgeTower) share: mask I's pixel fill, a blank image
    for "no image", and a default ``_batch`` that processes each distinct image of a batch once
    (``pixel_values`` and ``pixel_mask``). A family sets ``processor_class`` and ``name`` and implements
    ``_default_processor(config)`` (the processor of a model folder without one), ``_image_size(config)``
    (the blank image's side), ``_patch_size(config)``, ``_states(text, *visual)`` (``visual``: what
    ``_batch`` returns after the text, by default the pixel values and mask; it gives the caption's states
    (b, L, dim) and the W/S vectors (b, output_dim("S"))) and ``_lm_head(states)``."""

    processor_class = None
    blind_text = None  # what no_image: masked does to the blank image's tokens, in words
    needs_pixels = True
    supports_image_masking = True
    name = None  # the family's name in messages

    def __init__(self, spec):
        super().__init__(spec)
        self.fill = mean_colour(self.processor.image_mean)
        self._tokens = {}  # image shape -> its image tokens (_image_tokens)
        size = self._image_size(self.model.config)
        self.blank = Visual(np.zeros((0, 0), np.float32), image_size=(size, size),
                            image=np.full((size, size, 3), self.fill, np.uint8))
        self.no_image_mode = spec["no_image"]
        self.no_image = (f"a blank {size}x{size} image (the processor's mean colour {self.fill.tolist()})"
                         + (f", {self.blind_text}" if self.no_image_mode == "masked" else ""))
        self.image_masking = (f"the regions' boxes painted with the processor's mean colour {self.fill.tolist()} "
                              "before it runs (this project's extension: vlbias.models.pixels)")
        self.info.update({"image_masking": self.image_masking, "needs_pixels": True, "no_image": self.no_image,
                          "processor": {k: v for k, v in self.processor.to_dict().items() if k in PROCESSOR_KEYS}})

    def _load(self, spec):
        model, source, model_dir = load_model(spec, self.family, self.model_class, self.config_class,
                                              self.base_config, map_state=self._checkpoint_state)
        if model_dir is not None and (model_dir / "preprocessor_config.json").is_file():
            self.processor = self.processor_class.from_pretrained(model_dir, local_files_only=True,
                                                                  trust_remote_code=False)
        else:
            self.processor = self._default_processor(model.config)
        return model, source

    def embed(self, captions, regions, level, mask=None, mask_terms=None, words=None):
        if regions is None or any(r is None for r in regions):
            raise InputError("regions", f"{self.name}'s grounded vectors read the caption with its image: every "
                                        "caption needs its image")
        return super().embed(captions, regions, level, mask, mask_terms, words)

    def _image(self, entry, index, mask):
        """The caption's image, uint8 RGB (H, W, 3), with mask I's regions filled."""
        image = visual_field(entry, "image")
        if image is None or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise InputError(f"regions[{index}]", f"{self.name} reads the image's pixels: it needs image, uint8 RGB "
                                                  "(H, W, 3)")
        if mask == "I":
            image = fill_regions(image, visual_field(entry, "boxes_norm"), visual_field(entry, "is_person"), self.fill)
        return image

    def _shape(self, length, entry):
        """Its caption's bucket and its image's size (the processor pads a batch's pixels to its largest);
        rows: the bucket's and the image's tokens (the image stream's matmuls run on these)."""
        image = visual_field(self.blank if entry is None else entry, "image")
        if image is None:
            return (self._bucket(length), None), (self._bucket(length),)
        return (self._bucket(length), image.shape), (self._bucket(length), self._image_tokens(image.shape))

    def _image_tokens(self, shape):
        """The image tokens ([CLS_I] and the patches) of an image of ``shape`` after the processor: a
        function of the shape (the processor resizes by it), computed once per shape on a blank image."""
        if shape not in self._tokens:
            pixels = self.processor(images=[np.zeros(shape, np.uint8)], return_tensors="pt")["pixel_values"]
            patch = self._patch_size(self.model.config)
            self._tokens[shape] = (pixels.shape[-2] // patch) * (pixels.shape[-1] // patch) + 1
        return self._tokens[shape]

    def _blind(self, regions):
        """bool (b,): the captions without their image whose image tokens ``no_image: masked`` keeps out of
        the text's attention (none with ``blank``)."""
        return torch.tensor([entry is None and self.no_image_mode == "masked" for entry in regions], device=self.device)

    def _batch(self, captions, regions, index, mask, mask_terms, words):
        """(TextBatch, pixel values (b, 3, H, W), pixel mask (b, H, W), blind (b,)): each caption's image
        (a blank one for None), processed once per (image, mask) however many captions, batches and calls
        read it (``_once``: the processor's resizing is host work a GPU does not shrink). A batch's images
        are of one size (``_shape``), so the processor pads none of them."""
        text = encode_text(self.tokenizer, captions, self.max_length, mask_terms, words, self.token_mask,
                           LENGTH_BUCKET)
        processed = []
        for i, entry in zip(index, regions):
            entry, seen = (self.blank, None) if entry is None else (entry, mask)  # the blank image is never masked
            processed.append(self._once(entry, seen, lambda entry=entry, i=i, seen=seen:
                                        self._processed(entry, i, seen)))
        text.input_ids = text.input_ids.to(self.device)
        text.attention_mask = text.attention_mask.to(self.device)
        return (text, torch.cat([p for p, _ in processed]).to(self.device),
                torch.cat([m for _, m in processed]).to(self.device), self._blind(regions))

    def _processed(self, entry, index, mask):
        """(pixel values (1, 3, H, W), pixel mask (1, H, W)) of one caption's image, as the processor gives them."""
        processed = self.processor(images=[self._image(entry, index, mask)], return_tensors="pt")
        return processed["pixel_values"], processed["pixel_mask"]

    def _level_vectors(self, text, visual, level):
        states, pooled = self._states(text, *visual)
        if level != "C":
            return pooled
        rows = torch.arange(len(states), device=states.device)
        return states[rows, torch.from_numpy(text.positions).to(states.device)]

    def _mask_logits(self, text, visual, is_mask):
        states, _ = self._states(text, *visual)
        return [self._lm_head(states[j, is_mask[j]]) for j in range(len(states))]


@contextmanager
def hooked(module, hook):
    """``hook`` a forward hook of ``module`` (its output replaced by what it returns) within the block."""
    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()
