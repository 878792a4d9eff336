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
There is no Hugging Face checkpoint, so ``path`` and ``model_id`` are refused.

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

from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

from vlbias.errors import InputError
from vlbias.models import register
from vlbias.models.bert_layers import (LN_EPS, AddNorm, Embeddings, HeadTransform, Intermediate, Layer,
                                       LMPredictionHead, additive_mask, attend, init_weights)
from vlbias.models.vl import Visual, VLEncoder, _field

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
NUM_TASK_TOKENS = 20  # vilbert-multi-task's task embedding table


@dataclass
class ViLBertConfig:
    """The architecture keys of ViLBERT's BertConfig; defaults are config/bert_base_6layer_6conect.json."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    v_feature_size: int = 2048
    v_target_size: int = 1601
    v_hidden_size: int = 1024
    v_num_hidden_layers: int = 6
    v_num_attention_heads: int = 8
    v_intermediate_size: int = 1024
    bi_hidden_size: int = 1024
    bi_num_attention_heads: int = 8
    # after which vision / language layer each co-attention layer comes (v: 0 = before the first)
    v_biattention_id: list = field(default_factory=lambda: [0, 1, 2, 3, 4, 5])
    t_biattention_id: list = field(default_factory=lambda: [6, 7, 8, 9, 10, 11])
    task_specific_tokens: bool = False  # vilbert-multi-task's 12-in-1 model: a task token after [CLS]

    def __post_init__(self):
        v, t = list(self.v_biattention_id), list(self.t_biattention_id)
        if not (len(v) == len(t) and v == sorted(v) and t == sorted(t)
                and (not v or (v[-1] < self.v_num_hidden_layers and t[-1] < self.num_hidden_layers))):
            raise InputError("config", f"v_biattention_id {v} and t_biattention_id {t} must be as long, ascending "
                                       "and within the vision / language layers")

    def to_dict(self):
        return asdict(self)


class TextEmbeddings(Embeddings):
    """BERT's embeddings, and for the multi-task model a task token's embedding after [CLS]."""

    def __init__(self, config):
        super().__init__(config.vocab_size, config.hidden_size, config.max_position_embeddings, config.type_vocab_size)
        if config.task_specific_tokens:
            self.task_embeddings = nn.Embedding(NUM_TASK_TOKENS, config.hidden_size)

    def forward(self, input_ids, token_type_ids, task_ids=None):
        """(b, L) ids -> (b, L, hidden), or (b, L + 1, hidden) with the task token after [CLS] (no position)."""
        x = self.sum(input_ids, token_type_ids)
        if task_ids is not None:
            x = torch.cat([x[:, :1], self.task_embeddings(task_ids), x[:, 1:]], dim=1)
        return self.LayerNorm(x)


class ImageEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.image_embeddings = nn.Linear(config.v_feature_size, config.v_hidden_size)
        self.image_location_embeddings = nn.Linear(5, config.v_hidden_size)
        self.LayerNorm = nn.LayerNorm(config.v_hidden_size, eps=LN_EPS)

    def forward(self, features, locations):
        """(b, K, v_feature_size) features, (b, K, 5) positions -> (b, K, v_hidden)."""
        return self.LayerNorm(self.image_embeddings(features) + self.image_location_embeddings(locations))


class BiAttention(nn.Module):
    """Co-attention: vision queries attend to language keys and values, and language queries to vision's."""

    def __init__(self, config):
        super().__init__()
        if config.bi_hidden_size % config.bi_num_attention_heads:
            raise InputError("config", f"bi_hidden_size {config.bi_hidden_size} is not a multiple of "
                                       f"bi_num_attention_heads {config.bi_num_attention_heads}")
        self.heads = config.bi_num_attention_heads
        # 1: the vision stream, 2: the language stream
        self.query1 = nn.Linear(config.v_hidden_size, config.bi_hidden_size)
        self.key1 = nn.Linear(config.v_hidden_size, config.bi_hidden_size)
        self.value1 = nn.Linear(config.v_hidden_size, config.bi_hidden_size)
        self.query2 = nn.Linear(config.hidden_size, config.bi_hidden_size)
        self.key2 = nn.Linear(config.hidden_size, config.bi_hidden_size)
        self.value2 = nn.Linear(config.hidden_size, config.bi_hidden_size)

    def forward(self, image, image_mask, text, text_mask):
        """(vision queries' context from language (b, K, bi), language queries' context from vision (b, L, bi))."""
        from_text = attend(self.query1(image), self.key2(text), self.value2(text), text_mask, self.heads)
        from_image = attend(self.query2(text), self.key1(image), self.value1(image), image_mask, self.heads)
        return from_text, from_image


class BiOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense1 = nn.Linear(config.bi_hidden_size, config.v_hidden_size)
        self.LayerNorm1 = nn.LayerNorm(config.v_hidden_size, eps=LN_EPS)
        self.dense2 = nn.Linear(config.bi_hidden_size, config.hidden_size)
        self.LayerNorm2 = nn.LayerNorm(config.hidden_size, eps=LN_EPS)
        # in every checkpoint, never used by the original forward pass: kept so checkpoints load strictly
        self.q_dense1 = nn.Linear(config.bi_hidden_size, config.v_hidden_size)
        self.q_dense2 = nn.Linear(config.bi_hidden_size, config.hidden_size)

    def forward(self, image_context, image, text_context, text):
        return (self.LayerNorm1(self.dense1(image_context) + image),
                self.LayerNorm2(self.dense2(text_context) + text))


class ConnectionLayer(nn.Module):
    """A co-attention layer, then each stream's own feed-forward block."""

    def __init__(self, config):
        super().__init__()
        self.biattention = BiAttention(config)
        self.biOutput = BiOutput(config)
        self.v_intermediate = Intermediate(config.v_hidden_size, config.v_intermediate_size)
        self.v_output = AddNorm(config.v_intermediate_size, config.v_hidden_size)
        self.t_intermediate = Intermediate(config.hidden_size, config.intermediate_size)
        self.t_output = AddNorm(config.intermediate_size, config.hidden_size)

    def forward(self, image, image_mask, text, text_mask):
        image_context, text_context = self.biattention(image, image_mask, text, text_mask)
        image, text = self.biOutput(image_context, image, text_context, text)
        return (self.v_output(self.v_intermediate(image), image),
                self.t_output(self.t_intermediate(text), text))


class Encoder(nn.Module):
    """The language layers ``layer``, vision layers ``v_layer`` and co-attention layers ``c_layer``.

    Co-attention layer i follows vision layer v_biattention_id[i] - 1 and language layer
    t_biattention_id[i] - 1; the layers after the last co-attention layer end each stream.
    """

    def __init__(self, config):
        super().__init__()
        self.v_biattention_id, self.t_biattention_id = config.v_biattention_id, config.t_biattention_id
        self.layer = nn.ModuleList(Layer(config.hidden_size, config.num_attention_heads, config.intermediate_size)
                                   for _ in range(config.num_hidden_layers))
        self.v_layer = nn.ModuleList(Layer(config.v_hidden_size, config.v_num_attention_heads,
                                           config.v_intermediate_size) for _ in range(config.v_num_hidden_layers))
        self.c_layer = nn.ModuleList(ConnectionLayer(config) for _ in config.v_biattention_id)

    def forward(self, text, image, text_mask, image_mask):
        v_start = t_start = 0
        for c_layer, v_end, t_end in zip(self.c_layer, self.v_biattention_id, self.t_biattention_id):
            for layer in self.v_layer[v_start:v_end]:
                image = layer(image, image_mask)
            for layer in self.layer[t_start:t_end]:
                text = layer(text, text_mask)
            image, text = c_layer(image, image_mask, text, text_mask)
            v_start, t_start = v_end, t_end
        for layer in self.v_layer[v_start:]:
            image = layer(image, image_mask)
        for layer in self.layer[t_start:]:
            text = layer(text, text_mask)
        return text, image


class Pooler(nn.Module):
    """The first token's state through dense + ReLU (into the bi_hidden_size space)."""

    def __init__(self, in_size, out_size):
        super().__init__()
        self.dense = nn.Linear(in_size, out_size)

    def forward(self, states):
        return torch.relu(self.dense(states[:, 0]))


class ViLBertModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = TextEmbeddings(config)
        self.v_embeddings = ImageEmbeddings(config)
        self.encoder = Encoder(config)
        self.t_pooler = Pooler(config.hidden_size, config.bi_hidden_size)
        self.v_pooler = Pooler(config.v_hidden_size, config.bi_hidden_size)

    def forward(self, input_ids, features, locations, attention_mask, image_mask, task_ids=None):
        """Final states of both streams: language (b, L [+1 with a task token], hidden), vision (b, K, v_hidden).

        ``features`` (b, K, v_feature_size) and ``locations`` (b, K, 5) include the global token;
        ``attention_mask`` (b, L) and ``image_mask`` (b, K) are 1 for real tokens, 0 for padding.
        """
        text = self.embeddings(input_ids, torch.zeros_like(input_ids), task_ids)
        if task_ids is not None:
            attention_mask = torch.cat([attention_mask.new_ones((len(attention_mask), 1)), attention_mask], dim=1)
        image = self.v_embeddings(features, locations)
        return self.encoder(text, image, additive_mask(attention_mask, text.dtype),
                            additive_mask(image_mask, image.dtype))


class ImagePredictionHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.transform = HeadTransform(config.v_hidden_size)
        self.decoder = nn.Linear(config.v_hidden_size, config.v_target_size)

    def forward(self, states):
        return self.decoder(self.transform(states))


class PreTrainingHeads(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.predictions = LMPredictionHead(config.hidden_size, config.vocab_size)
        self.bi_seq_relationship = nn.Linear(config.bi_hidden_size, 2)
        self.imagePredictions = ImagePredictionHead(config)


class ViLBertForPreTraining(nn.Module):
    """BertForMultiModalPreTraining: the two streams (``bert``) and the pre-training heads (``cls``)."""

    _tied_weights_keys = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight"}

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.bert = ViLBertModel(config)
        self.cls = PreTrainingHeads(config)
        self.apply(lambda m: init_weights(m, config.initializer_range))
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight

    def forward(self, input_ids, features, locations, attention_mask, image_mask, task_ids=None):
        """The pre-training heads' outputs: masked-word logits (b, L, vocab), masked-region class
        logits (b, K, v_target_size), caption-image alignment logits (b, 2) from the product of the
        two pooled streams (fusion_method "mul")."""
        text, image = self.bert(input_ids, features, locations, attention_mask, image_mask, task_ids)
        pooled = self.bert.t_pooler(text) * self.bert.v_pooler(image)
        return self.cls.predictions(text), self.cls.imagePredictions(image), self.cls.bi_seq_relationship(pooled)


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
        self.max_regions = spec.get("max_regions", 36)
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
        if self.masks_every_run and entry is not None and len(_field(entry, "features")) < AUTHORS_ROWS:
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
        person = _field(entry, "is_person")
        if person is None or person.shape != (len(feats),) or person.dtype != bool:
            raise InputError(f"regions[{index}]", f"image masking needs is_person, bool of shape ({len(feats)},)")
        # their reader: a global token of every region, then the regions (_image_features_reader.py:207-222)
        feats = np.concatenate([feats.sum(axis=0, keepdims=True) / len(feats), feats])[:AUTHORS_ROWS]
        boxes = np.concatenate([np.float32([[0, 0, 1, 1]]), boxes])[:AUTHORS_ROWS]
        feats[person[:AUTHORS_ROWS]] = 0  # row i for region i: one row early (bias_dataset.py:386-392)
        return feats, boxes

    def _batch(self, captions, regions, first, mask, mask_terms, words):
        text, feats, boxes, vmask = super()._batch(captions, regions, first, mask, mask_terms, words)
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
