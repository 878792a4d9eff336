"""ViLBERT's network (Lu et al. 2019), ported from vilbert_beta's and vilbert-multi-task's
vilbert/vilbert.py: module and parameter names as their checkpoints', so those load strictly. What
it is fed, and how, is the adapter's (vlbias.models.vilbert).

A language and a vision BERT stream exchanging information in co-attention layers: co-attention
layer i follows vision layer v_biattention_id[i] - 1 and language layer t_biattention_id[i] - 1.
The 12-in-1 (multi-task) model adds a task token after [CLS] (``task_specific_tokens``).
"""

from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from vlbias.errors import InputError
from vlbias.models.bert_layers import (LN_EPS, AddNorm, Embeddings, Intermediate, Layer, LMPredictionHead,
                                       PredictionHead, additive_mask, attend, init_weights)

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


class PreTrainingHeads(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.predictions = LMPredictionHead(config.hidden_size, config.vocab_size)
        self.bi_seq_relationship = nn.Linear(config.bi_hidden_size, 2)
        self.imagePredictions = PredictionHead(config.v_hidden_size, config.v_target_size)  # masked regions


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
