"""LXMERT (Tan & Bansal 2019): a language, an object-relationship and a cross-modality encoder.

Config entry (``adapter: lxmert``): the keys of vlbias.models.vl; the published model is
``unc-nlp/lxmert-base-uncased`` (LxmertConfig's defaults: 9 language, 5 object, 5 cross layers;
2048-d bottom-up-attention features of 36 boxes per image, each with its normalised box).

The language output is the language stream after the cross-modality layers (``language_output``).
``ws_vector: language+visual`` (the authors' code, scripts/models/modeling.py:72-76, also for the
masked T and I runs) makes the W and S vectors that state's [CLS] concatenated with the vision
stream's first state (``vision_output[:, 0]``, the first region; LXMERT has no visual [CLS]):
2 × hidden_size wide; C stays the language state. The default ``language`` is the paper's ("the
outputs of the language Transformer", section 4).

Image masking: LXMERT's masked-object pre-training replaced a masked region's RoI feature by zeros
(Tan & Bansal 2019, section 3.1.2), keeping its box; Ross et al.'s code masks person regions the
same way (features zeroed, boxes kept). No visual input is one such masked region covering the
whole image, because LXMERT cannot run without regions.

Image-only work once per (image, mask): the vision stream before the cross-modality layers (the
regions' ``visn_fc`` and the object-relationship layers ``r_layers``) reads the regions alone; it is
computed once however many captions read the image (vlbias.models.vl ``_once``) and handed to
transformers' LXMERT in their place. A batch holds images of one region count (nothing padded), so
the vectors are bit-identical to the per-caption path (tests/test_image_once.py).
"""

import numpy as np
import torch
from torch import nn
from transformers import LxmertConfig, LxmertForPreTraining

from vlbias.models import register
from vlbias.models.vl import Given, VLEncoder, replaced
from vlbias.visual import Visual


@register("lxmert")
class LxmertEncoder(VLEncoder):
    family = "lxmert"
    config_class = LxmertConfig
    model_class = LxmertForPreTraining
    base_config = {}  # LxmertConfig's defaults are lxmert-base-uncased
    feature_dim_key = "visual_feat_dim"
    uses_boxes = True
    supports_image_masking = True
    image_masking = "region features set to zeros, boxes kept (LXMERT's masked-object pre-training)"
    no_image = "one region with zero features and the whole-image box (0, 0, 1, 1)"

    def _no_image(self):
        return Visual(np.zeros((1, self.feature_dim), dtype=np.float32),
                      np.array([[0, 0, 1, 1]], dtype=np.float32))

    def _masked_region(self, feats):
        return np.zeros_like(feats)

    def _batch(self, captions, regions, index, mask, mask_terms, words):
        """(TextBatch, features (b,K,D), boxes (b,K,4), region mask (b,K), per caption its image's vision
        stream after the object-relationship layers (1, K, hidden))."""
        return (*super()._batch(captions, regions, index, mask, mask_terms, words),
                [self._once(entry, mask, lambda i=i, entry=entry: self._vision(entry, i, mask))
                 for i, entry in zip(index, regions)])

    def _vision(self, entry, index, mask):
        """One image's vision stream as LxmertEncoder computes it before its cross-modality layers."""
        feats, boxes = (torch.from_numpy(a)[None].to(self.device) for a in self._visual(entry, index, mask))
        encoder = self.model.lxmert.encoder
        # its regions all attended, the additive mask as LxmertModel makes it
        extended = (1.0 - feats.new_ones((1, 1, 1, feats.shape[1]))) * torch.finfo(feats.dtype).min
        states = encoder.visn_fc(feats, boxes)
        for layer in encoder.r_layers:
            states = layer(states, extended)[0]
        return states

    def _streams(self, text, feats, boxes, vmask, vision):
        with replaced(self.model.lxmert.encoder, visn_fc=Given(vision), r_layers=nn.ModuleList()):
            out = self.model.lxmert(input_ids=text.input_ids, attention_mask=text.attention_mask,
                                    visual_feats=feats, visual_pos=boxes, visual_attention_mask=vmask)
        return out.language_output, out.vision_output

    def _language_states(self, text, *visual):
        return self._streams(text, *visual)[0]

    def _lm_head(self, states):
        return self.model.cls.predictions(states)
