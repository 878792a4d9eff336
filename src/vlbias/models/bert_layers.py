"""BERT's building blocks with the parameter names of the original (pytorch-pretrained-bert) checkpoints.

ViLBERT and VL-BERT are written on Hugging Face's first BERT port, so their checkpoints name a
Transformer layer ``attention.self.{query,key,value}``, ``attention.output.{dense,LayerNorm}``,
``intermediate.dense``, ``output.{dense,LayerNorm}`` and the masked-language-model head
``predictions.{transform.dense,transform.LayerNorm,decoder,bias}``. These modules keep the names
(so the checkpoints load strictly by name) and are inference-only: no dropout.

Conventions of the originals kept here: GELU is the exact (erf) one; LayerNorm has eps 1e-12; an
attention mask is additive, 0 where attended and -10000 where masked (not -inf: a query whose keys
are all masked attends uniformly instead of giving NaN).
"""

import torch
from torch import nn
from torch.nn import functional as F

LN_EPS = 1e-12


def additive_mask(mask, dtype):
    """(b, K) 1/0 (or bool) -> (b, 1, 1, K) additive attention mask: 0 where attended, -10000 elsewhere."""
    return (1.0 - mask[:, None, None, :].to(dtype)) * -10000.0


def attend(query, key, value, mask, heads):
    """Multi-head scaled dot-product attention: (b, Lq, d) queries over (b, Lk, d) keys -> (b, Lq, d).

    ``mask`` is additive, (b, 1, 1, Lk) or (b, 1, Lq, Lk).
    """
    b, lq, d = query.shape
    split = lambda x: x.view(b, -1, heads, d // heads).transpose(1, 2)  # noqa: E731 - (b, heads, L, d/heads)
    out = F.scaled_dot_product_attention(split(query), split(key), split(value), attn_mask=mask)
    return out.transpose(1, 2).reshape(b, lq, d)


class SelfAttention(nn.Module):
    def __init__(self, hidden_size, heads):
        super().__init__()
        if hidden_size % heads:
            raise ValueError(f"hidden size {hidden_size} is not a multiple of the {heads} attention heads")
        self.heads = heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)

    def forward(self, x, mask):
        return attend(self.query(x), self.key(x), self.value(x), mask, self.heads)


class AddNorm(nn.Module):
    """LayerNorm(dense(x) + residual): the output half of an attention or feed-forward block."""

    def __init__(self, in_size, out_size):
        super().__init__()
        self.dense = nn.Linear(in_size, out_size)
        self.LayerNorm = nn.LayerNorm(out_size, eps=LN_EPS)

    def forward(self, x, residual):
        return self.LayerNorm(self.dense(x) + residual)


class Attention(nn.Module):
    def __init__(self, hidden_size, heads):
        super().__init__()
        self.self = SelfAttention(hidden_size, heads)
        self.output = AddNorm(hidden_size, hidden_size)

    def forward(self, x, mask):
        return self.output(self.self(x, mask), x)


class Intermediate(nn.Module):
    def __init__(self, hidden_size, intermediate_size):
        super().__init__()
        self.dense = nn.Linear(hidden_size, intermediate_size)

    def forward(self, x):
        return F.gelu(self.dense(x))


class Layer(nn.Module):
    """One Transformer encoder layer: self-attention, then the feed-forward block, each with add & norm."""

    def __init__(self, hidden_size, heads, intermediate_size):
        super().__init__()
        self.attention = Attention(hidden_size, heads)
        self.intermediate = Intermediate(hidden_size, intermediate_size)
        self.output = AddNorm(intermediate_size, hidden_size)

    def forward(self, x, mask):
        x = self.attention(x, mask)
        return self.output(self.intermediate(x), x)


class Embeddings(nn.Module):
    """LayerNorm(word + absolute position + token type embeddings)."""

    def __init__(self, vocab_size, hidden_size, max_position_embeddings, type_vocab_size):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=LN_EPS)

    def sum(self, input_ids, token_type_ids):
        """The summed embeddings before the LayerNorm, (b, L, hidden)."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.word_embeddings(input_ids) + self.position_embeddings(positions) + \
            self.token_type_embeddings(token_type_ids)

    def forward(self, input_ids, token_type_ids):
        return self.LayerNorm(self.sum(input_ids, token_type_ids))


class PortedBert(nn.Module):
    """BERT's encoder: what transformers' ``BertModel`` gives as ``last_hidden_state`` for a config with
    absolute positions, exact GELU and LayerNorm eps 1e-12 (``PortedBert.fits(config)``); its
    checkpoints load by name (the pooler, unused, is left out). A text encoder built on it starts in
    a fraction of a second, where importing transformers' modelling stack takes about three."""

    def __init__(self, vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
                 max_position_embeddings, type_vocab_size):
        super().__init__()
        self.embeddings = Embeddings(vocab_size, hidden_size, max_position_embeddings, type_vocab_size)
        self.encoder = nn.ModuleDict({"layer": nn.ModuleList(
            Layer(hidden_size, num_attention_heads, intermediate_size) for _ in range(num_hidden_layers))})

    KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "max_position_embeddings", "type_vocab_size")

    @staticmethod
    def fits(config):
        """Whether a Hugging Face config.json (a dict) describes a model this class computes exactly."""
        return (config.get("model_type") == "bert" and config.get("hidden_act", "gelu") == "gelu"
                and config.get("position_embedding_type", "absolute") == "absolute"
                and config.get("layer_norm_eps", LN_EPS) == LN_EPS and not config.get("is_decoder", False)
                and all(isinstance(config.get(k), int) for k in PortedBert.KEYS))

    @classmethod
    def from_config(cls, config):
        return cls(**{k: config[k] for k in cls.KEYS})

    def forward(self, input_ids, attention_mask, token_type_ids=None, skip=0):
        """(b, L) token ids and 1/0 attention mask -> (b, L, hidden) final hidden states (with ``skip``
        the states ``skip`` layers before the last: transformers' ``hidden_states[-1 - skip]``)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)
        mask = additive_mask(attention_mask, x.dtype)
        layers = self.encoder["layer"]
        for layer in layers[:len(layers) - skip]:
            x = layer(x, mask)
        return x


class HeadTransform(nn.Module):
    """dense, GELU and LayerNorm: what a prediction head applies before its decoder (BERT's
    BertPredictionHeadTransform, ViLBERT's BertImgPredictionHeadTransform); without the LayerNorm,
    ``layer_norm=False``, VL-BERT's VisualLinguisticBertMVRCHeadTransform."""

    def __init__(self, hidden_size, layer_norm=True):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=LN_EPS) if layer_norm else None

    def forward(self, x):
        x = F.gelu(self.dense(x))
        return x if self.LayerNorm is None else self.LayerNorm(x)


class PredictionHead(nn.Module):
    """A HeadTransform and a linear decoder to ``out_size`` classes, the decoder under the name the
    original's checkpoints give it: ViLBERT's masked-region head (BertImagePredictionHead, ``decoder``),
    VL-BERT's (VisualLinguisticBertMVRCHead, ``region_cls_pred``, no LayerNorm)."""

    def __init__(self, hidden_size, out_size, decoder="decoder", layer_norm=True):
        super().__init__()
        self.transform = HeadTransform(hidden_size, layer_norm)
        self.decoder_name = decoder
        setattr(self, decoder, nn.Linear(hidden_size, out_size))

    def forward(self, x):
        """(..., hidden) -> (..., out_size) logits."""
        return getattr(self, self.decoder_name)(self.transform(x))


class LMPredictionHead(nn.Module):
    """Masked-language-model logits; the decoder is the word-embedding matrix (tied by the caller)."""

    def __init__(self, hidden_size, vocab_size):
        super().__init__()
        self.transform = HeadTransform(hidden_size)
        self.decoder = nn.Linear(hidden_size, vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, x):
        """(..., hidden) -> (..., vocab_size) logits."""
        return self.decoder(self.transform(x)) + self.bias


def init_weights(module, std):
    """The originals' initialisation (init_bert_weights): N(0, std) weights, zero biases, unit LayerNorms."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
