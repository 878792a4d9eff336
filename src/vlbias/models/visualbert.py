"""VisualBERT (Li et al. 2019): a single-stream BERT over [CLS] caption [SEP] + region features.

Config entry (``adapter: visualbert``): the keys of vlbias.models.vl; the published model is
``uclanlp/visualbert-vqa-coco-pre`` (COCO pre-training, 2048-d bottom-up-attention features).
Boxes are not read: VisualBERT embeds region features alone (every region gets visual position 0).

The language output is the hidden states at the caption's positions of the joint sequence.
VisualBERT was pre-trained with masked language modelling only, never with masked regions, so
image masking is refused (``supports_image_masking = False``; tables show "–", as Ross et al.).
No visual input is zero regions: the caption alone, which VisualBERT accepts.
"""

import numpy as np
import torch
from transformers import VisualBertConfig, VisualBertForPreTraining

from vlbias.models import register
from vlbias.models.vl import Visual, VLEncoder


@register("visualbert")
class VisualBertEncoder(VLEncoder):
    family = "visualbert"
    default_model_id = "uclanlp/visualbert-vqa-coco-pre"
    config_class = VisualBertConfig
    model_class = VisualBertForPreTraining
    base_config = {"visual_embedding_dim": 2048}  # the COCO model's detector features (the class default is 512)
    feature_dim_key = "visual_embedding_dim"
    uses_boxes = False
    supports_image_masking = False
    no_image = "zero regions: the caption alone"

    def _no_image(self):
        return Visual(np.zeros((0, self.feature_dim), dtype=np.float32))

    def _language_states(self, text, feats, boxes, vmask):
        visual = {}
        if feats.shape[1]:  # a batch of captions without images runs as text alone
            # text tokens are segment 0, regions segment 1, as in VisualBERT's pre-training
            visual = {"visual_embeds": feats, "visual_attention_mask": vmask,
                      "visual_token_type_ids": torch.ones_like(vmask)}
        out = self.model.visual_bert(input_ids=text.input_ids, attention_mask=text.attention_mask,
                                     token_type_ids=torch.zeros_like(text.input_ids), **visual)
        return out.last_hidden_state[:, :text.input_ids.shape[1]]

    def _lm_head(self, states):
        return self.model.cls.predictions(states)
