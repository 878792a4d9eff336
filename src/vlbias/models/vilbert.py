"""ViLBERT (Lu et al. 2019): a language and a vision BERT stream exchanging information in co-attention layers.

Config entry (``adapter: vilbert``): the keys of vlbias.models.vl, and
    ws_vector     what W and S take: ``language`` (the language stream's [CLS] state, as the paper
                  says: the language output) or ``language+visual`` (Ross et al.'s code: that state
                  concatenated with the vision stream's first state, the global image token's;
                  ``output_dim`` is then dim + v_hidden_size for W and S). C is always the language
                  stream's state of the word. Default ``language``.
    max_regions   regions read per image, the first in the region store's order; default 36, as
                  ViLBERT's pre-training (10 to 36 boxes per image) and Ross et al.'s loader
                  (``region_len=36``); vilbert_beta's task loaders took up to 100
    task_id       the 12-in-1 (multi-task) model's task token, required with its
                  ``config: {task_specific_tokens: true}``: the number of a TASK<n> of vilbert-multi-task's
                  vilbert_tasks.yml, e.g. 7 (RetrievalCOCO) or 8 (RetrievalFlickr30k), the caption-image
                  alignment tasks
``config`` keys (ViLBertConfig) default to ``bert_base_6layer_6conect``, the configuration of both
published checkpoints.

Weights: the original checkpoints are plain state_dicts (read with ``weights_only=True``), loaded
strictly by name (``checkpoint:`` a local file or an http(s) URL, fetched once into the cache by
vlbias.weights; ``sha256`` pins it):
    vilbert_beta ``bert_base_6_layer_6_connect/pytorch_model_9.bin``: Conceptual Captions
        pre-training, the model Ross et al. measure (Google Drive, see CHECKPOINTS; download it by
        hand and give the local path)
    vilbert-multi-task ``multi_task_model.bin`` (12-in-1; set ``task_specific_tokens: true`` and
        ``task_id``) or its Conceptual Captions ``pretrained_model.bin``: direct URLs (CHECKPOINTS).
        The 12-in-1 task heads (``vil_prediction`` ...) are not used and not loaded.
There is no Hugging Face checkpoint, so ``path`` and ``model_id`` are refused. The network is
vlbias.models.modeling_vilbert; this module feeds it.

Visual input, as ViLBERT was trained (vilbert_beta's _image_features_reader): bottom-up-attention
region features (2048-d, the ``bua`` detector) with 5-d positions x1/w, y1/h, x2/w, y2/h and the
box's share of the image area, after a leading global image token: the mean of the regions'
features at position (0, 0, 1, 1, 1).

Image masking: ViLBERT's masked-region pre-training set a masked region's feature to zeros and kept
its position; the global token is the mean of the features after masking (zeros included), as its
pre-training batches computed it. (Ross et al.'s loader divided the masked mean by the number of
regions + 1; it also prepended a second global token: ``vilbert_image_mask: in_place`` below.) No visual input is one
region with zero features and the whole-image box after the (then zero) global token: ViLBERT
cannot run without regions, and zero features are its masked-region input (as LXMERT's adapter).

Fed as Ross et al.'s loader fed it (protocol switches, docs/grounded.md rows 8 and 9):
    vilbert_padding     ``masked`` (default) or ``attended``: the model called without text or
                        region attention masks (their scripts/models/modeling.py:191-220) on captions
                        padded to 36 [PAD]s (their max_seq_length), so padding is attended; a caption
                        longer than 36 tokens is an error (their loader cut it)
    vilbert_image_mask  ``regions`` (default) or ``in_place``: their reader's rows (the global token,
                        the mean of ALL regions, then the first 35 regions), with the row at the index
                        of each masked region zeroed (the row before it: row 0 is the global token), in
                        every run, masked or not (bias_dataset.py:271-272, 382-397 write into the
                        array both runs read); then their collate's second global token (the rows'
                        sum over 36, over 37 in the image-masked run) at (0, 0, 1, 1, 1). An image with
                        fewer than 36 regions made their loader raise IndexError (the loop over 36
                        rows reads a class id per row): ``refusal`` gives that reason and the
                        grounded job leaves the pair out.
"""

import numpy as np
import torch
from torch import nn

from vlbias.errors import InputError
from vlbias.models import register
from vlbias.models.modeling_vilbert import NUM_TASK_TOKENS, ViLBertConfig, ViLBertForPreTraining
from vlbias.models.vl import VLEncoder
from vlbias.visual import Visual, visual_field

AUTHORS_SEQ_LEN = 36  # Ross et al.'s max_seq_length (configs/vilbert_google_images.yml:14)
AUTHORS_ROWS = 36     # their loader's region_len: the reader's global token and 35 regions
# The published checkpoints. vilbert_beta's are in Google Drive folders (no direct URL): download
# pytorch_model_9.bin by hand. vilbert-multi-task's are direct downloads.
CHECKPOINTS = {
    "vilbert_beta 6-layer Conceptual Captions (Ross et al.)":
        "https://drive.google.com/drive/folders/1JVM5WiolJJLnY9_lruxSaSop7IFX8a-v",
    "vilbert-multi-task Conceptual Captions pre-training":
        "https://dl.fbaipublicfiles.com/vilbert-multi-task/pretrained_model.bin",
    "vilbert-multi-task 12-in-1 (task_specific_tokens: true)":
        "https://dl.fbaipublicfiles.com/vilbert-multi-task/multi_task_model.bin",
}


def vilbert_inputs(feats, boxes, vmask, count=None):
    """ViLBERT's visual input from padded regions: (features (b, 1+K, D), locations (b, 1+K, 5), mask (b, 1+K)).

    ``feats`` (b, K, D) (zeros at padding), ``boxes`` (b, K, 4) normalised x1, y1, x2, y2, ``vmask``
    (b, K). A global token leads: the sum of the image's regions over ``count`` (b,) (default their
    number: the mean) at (0, 0, 1, 1, 1); each region's fifth coordinate is its share of the image area.
    """
    n = (vmask.sum(dim=1) if count is None else count)[:, None].to(feats.dtype)
    glob = feats.sum(dim=1, keepdim=True) / n[:, :, None]
    area = (boxes[..., 3] - boxes[..., 1]) * (boxes[..., 2] - boxes[..., 0])
    locations = torch.cat([boxes, area[..., None]], dim=-1)
    whole = locations.new_tensor([0, 0, 1, 1, 1]).expand(len(boxes), 1, 5)
    return (torch.cat([glob, feats], dim=1), torch.cat([whole, locations], dim=1),
            torch.cat([vmask.new_ones((len(vmask), 1)), vmask], dim=1))


@register("vilbert")
class ViLBertEncoder(VLEncoder):
    family = "vilbert"
    original_checkpoints = CHECKPOINTS
    config_class = ViLBertConfig
    model_class = ViLBertForPreTraining
    base_config = {}  # ViLBertConfig's defaults are bert_base_6layer_6conect
    feature_dim_key = "v_feature_size"
    uses_boxes = True
    supports_image_masking = True
    image_masking = ("region features set to zeros, positions kept, the global token the mean after masking "
                     "(ViLBERT's masked-region pre-training)")
    no_image = "one region with zero features and the whole-image box, after the global token (then zeros)"

    def __init__(self, spec):
        super().__init__(spec)
        self.max_regions = spec["max_regions"]
        if isinstance(self.max_regions, bool) or not isinstance(self.max_regions, int) or self.max_regions < 1:
            raise InputError("max_regions", f"must be a positive integer, got {self.max_regions!r}")
        config = self.model.config
        task_id = spec.get("task_id")
        if config.task_specific_tokens != (task_id is not None):
            raise InputError("task_id", "give a task_id exactly for a model with task_specific_tokens (the 12-in-1 "
                                        "multi-task model)")
        if task_id is not None and not (isinstance(task_id, int) and 0 <= task_id < NUM_TASK_TOKENS):
            raise InputError(f"task_id {task_id!r}", f"must be an integer in 0..{NUM_TASK_TOKENS - 1}")
        self.task_id = task_id
        self.masks_every_run = self.feed["vilbert_image_mask"] == "in_place"
        self.info.update({"max_regions": self.max_regions, "task_id": task_id,
                          "output": "language stream hidden states; W/S: [CLS]" + (
                              " ++ the vision stream's global token" if self.ws_vector != "language" else "")
                          + ", C: first sub-token of the word"})

    def _visual_dim(self, config):
        return config.v_hidden_size

    def _no_image(self):
        return Visual(np.zeros((1, self.feature_dim), dtype=np.float32), np.array([[0, 0, 1, 1]], dtype=np.float32))

    def _masked_region(self, feats):
        return np.zeros_like(feats)

    def refusal(self, entry):
        if self.masks_every_run and entry is not None and len(visual_field(entry, "features")) < AUTHORS_ROWS:
            return (f"fewer than {AUTHORS_ROWS} regions: Ross et al.'s ViLBERT loader raises IndexError here "
                    "(scripts/dataloaders/vilbert/bias_dataset.py:387), so their code gave no number")
        return None

    def _visual(self, entry, index, mask):
        if not self.masks_every_run or entry is None:
            feats, boxes = super()._visual(entry, index, mask)
            return feats[:self.max_regions], boxes[:self.max_regions]
        if self.refusal(entry):
            raise InputError(f"regions[{index}]", self.refusal(entry))
        feats, boxes = super()._visual(entry, index, None)
        person = visual_field(entry, "is_person")
        if person is None or person.shape != (len(feats),) or person.dtype != bool:
            raise InputError(f"regions[{index}]", f"image masking needs is_person, bool of shape ({len(feats)},)")
        # their reader: a global token of every region, then the regions (_image_features_reader.py:207-222)
        feats = np.concatenate([feats.sum(axis=0, keepdims=True) / len(feats), feats])[:AUTHORS_ROWS]
        boxes = np.concatenate([np.float32([[0, 0, 1, 1]]), boxes])[:AUTHORS_ROWS]
        feats[person[:AUTHORS_ROWS]] = 0  # row i for region i: one row early (bias_dataset.py:386-392)
        return feats, boxes

    def _shape(self, length, entry):
        (bucket, n), _ = super()._shape(length, entry)
        if entry is not None:  # the rows it reads (_visual)
            n = min(n + 1, AUTHORS_ROWS) if self.masks_every_run else min(n, self.max_regions)
        return (bucket, n), (bucket, n)

    def _bucket(self, length):
        if self.feed["vilbert_padding"] == "attended" and length <= AUTHORS_SEQ_LEN:
            return AUTHORS_SEQ_LEN  # every caption read as their loader padded it (_batch)
        return super()._bucket(length)

    def _batch(self, captions, regions, index, mask, mask_terms, words):
        text, feats, boxes, vmask = super()._batch(captions, regions, index, mask, mask_terms, words)
        count = vmask.sum(dim=1)
        if self.masks_every_run:  # their collate divides the image-masked run's sum by one row more (line 174)
            count = count + (mask == "I")
        if self.feed["vilbert_padding"] == "attended":
            lengths = text.attention_mask.sum(dim=1).tolist()
            for caption, n in zip(captions, lengths):
                if n > AUTHORS_SEQ_LEN:
                    raise InputError(f"caption '{caption}'", f"is {n} tokens long, more than the {AUTHORS_SEQ_LEN} "
                                                             "Ross et al.'s loader padded to (it cut the rest)")
            pad = AUTHORS_SEQ_LEN - text.input_ids.shape[1]
            text.input_ids = nn.functional.pad(text.input_ids, (0, pad), value=self.tokenizer.pad_token_id)
            text.attention_mask = torch.ones_like(text.input_ids)
        return text, feats, boxes, vmask, count

    def _streams(self, text, feats, boxes, vmask, count):
        """Final language (b, L, hidden) and vision (b, 1+K, v_hidden) states; the task token left out."""
        task_ids = None
        if self.task_id is not None:
            task_ids = torch.full((len(text.input_ids), 1), self.task_id, device=self.device)
        features, locations, image_mask = vilbert_inputs(feats, boxes, vmask, count)
        if self.feed["vilbert_padding"] == "attended":  # called without an image attention mask
            image_mask = torch.ones_like(image_mask)
        language, vision = self.model.bert(text.input_ids, features, locations, text.attention_mask, image_mask,
                                           task_ids)
        if task_ids is not None:
            language = torch.cat([language[:, :1], language[:, 2:]], dim=1)
        return language, vision

    def _language_states(self, text, *visual):
        return self._streams(text, *visual)[0]

    def _lm_head(self, states):
        return self.model.cls.predictions(states)
