"""VisualBERT (Li et al. 2019): a single-stream BERT over [CLS] caption [SEP] + region features.

Config entry (``adapter: visualbert``): the keys of vlbias.models.vl, and

    image_feature_cap   at most this many regions of an image are read, the first ones as stored
                        (VisualBERT's dataloader cap, ``image_screening_parameters`` of its NLVR2
                        configs and Ross et al.'s scripts/dataloaders/visualbert/bias_dataset.py:48:
                        144); default: all

The published models (Hugging Face ``uclanlp/``): ``visualbert-vqa-coco-pre`` (the default; COCO
pre-training with the VQA config, 2048-d Detectron features of Pythia's ``detectron_fix_100``), and
``visualbert-nlvr2-coco-pre``, the conversion of ``nlvr2_coco_pre_trained.th`` (COCO pre-training
with the NLVR2 config: 1024-d fc7 features of Detectron's e2e_mask_rcnn_R-101-FPN_2x, model
35861858, as vlbias.regions.detectron_fpn computes them), which Ross et al. used
(configs/visualbert_*_images.yml; the checkpoint is on Google Drive, id
1QvivVfRsRF518OQSQNaN7aFk6eQ43vP_, linked from uclanlp/visualbert's README). That original file is a
torch state_dict of VisualBERT's own code (``bert.bert.*``, ``bert.cls.*``); given as
``checkpoint`` (with ``config: {visual_embedding_dim: 1024}``) it is read with weights_only and its
keys are mapped strictly onto transformers' VisualBertForPreTraining (``original_state_dict``).

Boxes are not read: VisualBERT embeds region features alone (every region gets visual position 0).
Regions are token type 0, the text's type: VisualBERT's pre-training never passed
``visual_embeddings_type`` (its COCO reader has none), so its BertVisualModel filled zeros
(pytorch_pretrained_bert/modeling.py:1408-1414 of uclanlp/visualbert), and so did Ross et al.'s code
(scripts/models/visualbert/model.py passes None); transformers would default to ones.

The language output is the hidden states at the caption's positions of the joint sequence.
VisualBERT was pre-trained with masked language modelling only, never with masked regions, so
image masking is refused (``supports_image_masking = False``; tables show "–", as Ross et al.).
No visual input is zero regions: the caption alone, which VisualBERT accepts.
"""

import numpy as np
import torch
from transformers import VisualBertConfig, VisualBertForPreTraining

from vlbias.errors import InputError
from vlbias.io.checkpoints import some
from vlbias.models import register
from vlbias.models.vl import VLEncoder
from vlbias.visual import Visual

# VisualBERT's own names -> transformers' (as transformers' conversion script renames them)
_ORIGINAL_NAMES = (("bert.bert.", "visual_bert."), ("bert.cls.", "cls."),
                   ("token_type_embeddings_visual", "visual_token_type_embeddings"),
                   ("position_embeddings_visual", "visual_position_embeddings"),
                   ("embeddings.projection.", "embeddings.visual_projection."))


def original_state_dict(state, expected, source):
    """``state`` of VisualBERT's own code (keys ``bert.bert.*``, ``bert.cls.*``) with transformers'
    VisualBertForPreTraining names; ``expected``: the model's state_dict keys. The prediction
    head's bias is also the decoder's (transformers keeps both names). Any key that maps to no
    parameter, or a parameter no key fills, is an error naming ``source``."""
    out = {}
    for key, value in state.items():
        new = key
        for old, to in _ORIGINAL_NAMES:
            new = new.replace(old, to)
        out[new] = value
    if "cls.predictions.bias" in out:
        out.setdefault("cls.predictions.decoder.bias", out["cls.predictions.bias"])
    unexpected = sorted(set(out) - set(expected))
    missing = sorted(k for k in set(expected) - set(out) if not k.endswith("position_ids"))
    if unexpected or missing:
        raise InputError(source, f"not a VisualBERT pre-training checkpoint: unexpected {some(unexpected)}, "
                                 f"missing {some(missing)}")
    return out


@register("visualbert")
class VisualBertEncoder(VLEncoder):
    family = "visualbert"
    config_class = VisualBertConfig
    model_class = VisualBertForPreTraining
    base_config = {"visual_embedding_dim": 2048}  # the COCO model's detector features (the class default is 512)
    feature_dim_key = "visual_embedding_dim"
    uses_boxes = False
    supports_image_masking = False
    no_image = "zero regions: the caption alone"

    def __init__(self, spec):
        cap = spec.get("image_feature_cap")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise InputError("image_feature_cap", f"must be a positive integer, got {cap!r}")
        self.image_feature_cap = cap
        super().__init__(spec)
        self.info["image_feature_cap"] = cap
        self.info["region_token_type"] = 0

    def _checkpoint_state(self, state, model, path):
        if any(k.startswith("bert.bert.") for k in state):
            return original_state_dict(state, model.state_dict(), path)
        return state

    def _visual(self, entry, index, mask):
        feats, boxes = super()._visual(entry, index, mask)
        return feats[:self.image_feature_cap], boxes[:self.image_feature_cap]

    def _no_image(self):
        return Visual(np.zeros((0, self.feature_dim), dtype=np.float32))

    def _shape(self, length, entry):
        (bucket, n), _ = super()._shape(length, entry)
        n = n if self.image_feature_cap is None else min(n, self.image_feature_cap)  # the regions it reads
        return (bucket, n), (bucket, n)

    def _language_states(self, text, feats, boxes, vmask):
        visual = {}
        if feats.shape[1]:  # a batch of captions without images runs as text alone
            # text and regions are both token type 0, as in VisualBERT's pre-training (module docstring)
            visual = {"visual_embeds": feats, "visual_attention_mask": vmask,
                      "visual_token_type_ids": torch.zeros_like(vmask)}
        out = self.model.visual_bert(input_ids=text.input_ids, attention_mask=text.attention_mask,
                                     token_type_ids=torch.zeros_like(text.input_ids), **visual)
        return out.last_hidden_state[:, :text.input_ids.shape[1]]

    def _lm_head(self, states):
        return self.model.cls.predictions(states)
