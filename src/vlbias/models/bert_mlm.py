"""Text-only BERT with its masked-language-model head: the language-only reference P_L of vlbias.suites.mlm.

Config entry (``adapter: bert_mlm``): the keys of vlbias.models.vl (weights: random + seed +
config, checkpoint, path, or model_id + revision; tokenizer, max_length, batch_size, device,
threads); the published model is ``bert-base-uncased`` (BertForMaskedLM: the pre-training
checkpoint's MLM head; its next-sentence head is not used). It shares VLEncoder's loading,
tokenisation, ``mask_logprobs`` and ``embed`` (the [CLS] state for W/S), so its probabilities are
read exactly as those of the vision-language models they are compared with.

The model has no visual input at all: ``regions`` must be None (or all entries None).
"""

import numpy as np
import torch
from transformers import BertConfig, BertForMaskedLM

from vlbias.errors import InputError
from vlbias.models import register
from vlbias.models.vl import VLEncoder
from vlbias.visual import Visual


@register("bert_mlm")
class BertMaskedLM(VLEncoder):
    family = "bert_mlm"
    config_class = BertConfig
    model_class = BertForMaskedLM
    base_config = {}  # BertConfig's defaults are bert-base-uncased
    feature_dim_key = None
    uses_boxes = False
    supports_image_masking = False
    no_image = "text only: the model reads no image"

    def _check(self, captions, regions, mask, mask_terms):
        captions, regions = super()._check(captions, regions, mask, mask_terms)
        if any(r is not None for r in regions):
            raise InputError("regions", f"{self.family} is a text-only model: pass None (no visual input)")
        return captions, regions

    def _no_image(self):
        return Visual(np.zeros((0, 0), dtype=np.float32))

    def _language_states(self, text, feats, boxes, vmask):
        out = self.model.bert(input_ids=text.input_ids, attention_mask=text.attention_mask,
                              token_type_ids=torch.zeros_like(text.input_ids))
        return out.last_hidden_state

    def _lm_head(self, states):
        return self.model.cls.predictions(states)
