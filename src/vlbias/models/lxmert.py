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
"""

import numpy as np
from transformers import LxmertConfig, LxmertForPreTraining

from vlbias.models import register
from vlbias.models.vl import VLEncoder
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

    def _streams(self, text, feats, boxes, vmask):
        out = self.model.lxmert(input_ids=text.input_ids, attention_mask=text.attention_mask,
                                visual_feats=feats, visual_pos=boxes, visual_attention_mask=vmask)
        return out.language_output, out.vision_output

    def _language_states(self, text, feats, boxes, vmask):
        return self._streams(text, feats, boxes, vmask)[0]

    def _lm_head(self, states):
        return self.model.cls.predictions(states)
