"""iGPT (Chen et al. 2020) as an image encoder, through transformers' ImageGPT, as the iEAT authors read it.

    encoder = build({"adapter": "igpt", "model_id": "openai/imagegpt-large", "revision": "<commit>", "layer": 20})
    encoder.encode_images(pixels)      # uint8 (n, H, W, 3) square RGB -> float32 (n, encoder.dim)
    encoder.encode_outputs(pixels)     # {"layer10": (n, dim), "layer20": (n, dim)} for layer: [10, 20]

What each vector is (Steed & Caliskan 2021; their code, ryansteed/ieat ``ieat/utils.py`` and
``ieat/models.py``: ``resize``, ``normalize_img``, ``color_quantize_np``, ``OpenAIExtractor``,
``LogitExtractor``):
    tokens   the square image shrunk to n_px x n_px (32 for the public models) with OpenCV's
             INTER_AREA (``vlbias.images.decode.area_resize``; skipped when the image already has
             n_px pixels a side), scaled to [-1, 1] as x / 127.5 - 1, each pixel replaced by the index
             of its nearest colour cluster (squared Euclidean distance): n_px² tokens, row by row
    context  the start-of-sequence token (vocab_size - 1), then the tokens without the last one
    hidden   ``layer`` l: the hidden states entering block l (the embeddings for l = 0), normalised
             by the first layer norm of block l + 1 and averaged over the n_px² positions. (The
             authors took ``hidden_states[l]`` and ``h[l+1].ln_1``; the paper: l = 20 of iGPT-L's 48.)
    logits   the next-pixel logits at the last position: (n_clusters,) per image
Both kinds, and several layers, come from one pass (``output: [hidden, logits]``, ``layer: [10, 20]``):
``encode_outputs`` returns them by name (``vlbias.models.families.outputs``: ``layer10``, ``layer20``, ``logits``).

Config entry keys (``adapter: igpt``):
    weights         the keys of vlbias.models.hf (``weights: random`` + ``seed`` + ``config``,
                    ``checkpoint``, ``path``, or ``model_id`` + ``revision``); default model
                    ``openai/imagegpt-large``; ``config`` overrides ImageGPTConfig keys (n_embd,
                    n_layer, n_head, n_positions = n_px², vocab_size = clusters + 1)
    layer           a layer index or a list of them, all computed in one pass (default 20);
                    0 <= l <= n_layer - 2
    output          ``hidden`` (default), ``logits``, or both: ``[hidden, logits]``
    clusters        the colour clusters: a ``.npy`` file (OpenAI's ``kmeans_centers.npy``), a
                    ``.json`` image processor configuration (its ``clusters``), or ``random``
                    (uniform in [-1, 1], from ``seed``; for random-weight models); default: the
                    ``preprocessor_config.json`` of the model directory or Hugging Face id
    norm            the layer norm the model runs with: ``std`` (default), the authors' port
                    (x / sqrt(var(x) + eps) * g, the standard deviation about the mean, x itself not
                    centred), or ``rms``, iGPT's own (x / sqrt(mean(x²) + eps) * g: OpenAI's code and
                    transformers' ImageGPT). The published vectors came from ``std``.
    batch_size, device, threads, precision   see vlbias.runtime
"""

import json
import logging
import math
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import ImageGPTConfig, ImageGPTForCausalImageModeling
from transformers.models.imagegpt.modeling_imagegpt import ImageGPTLayerNorm

from vlbias.errors import InputError
from vlbias.images.decode import area_resize, square_images
from vlbias.io.fetch import sha256_file
from vlbias.models import register
from vlbias.models.hf import load_model
from vlbias.models.families import outputs
from vlbias.runtime import autocast, precision, runtime
from vlbias.schemas import defaults

log = logging.getLogger(__name__)

OUTPUTS = ("hidden", "logits")
NORMS = ("std", "rms")


class StdLayerNorm(ImageGPTLayerNorm):
    """The layer norm of the iEAT authors' iGPT port: divides by the standard deviation about the mean."""

    def forward(self, tensor):
        return tensor / torch.sqrt(tensor.var(dim=-1, unbiased=False, keepdim=True) + self.eps) * self.weight


@register("igpt")
class IGPTEncoder:
    def __init__(self, spec):
        self.device, self.batch_size = runtime(spec)
        self.precision = precision(spec)
        output = spec["output"]
        self.kinds = output if isinstance(output, list) else [output]
        if not self.kinds or not set(self.kinds) <= set(OUTPUTS) or len(set(self.kinds)) != len(self.kinds):
            raise InputError(f"output {output!r}", f"must be one of {', '.join(OUTPUTS)}, or a list of them")
        self.norm = spec["norm"]
        if self.norm not in NORMS:
            raise InputError(f"norm '{self.norm}'", f"must be one of {', '.join(NORMS)}")
        model, source, model_dir = load_model(spec, "igpt", ImageGPTForCausalImageModeling, ImageGPTConfig, {})
        self.model = model.eval().requires_grad_(False).to(self.device)
        config = self.model.config
        self.n_px = math.isqrt(config.n_positions)
        if self.n_px ** 2 != config.n_positions:
            raise InputError("config", f"n_positions {config.n_positions} is not a square (n_px²)")
        if self.norm == "std":
            for module in self.model.modules():
                if type(module) is ImageGPTLayerNorm:
                    module.__class__ = StdLayerNorm  # same parameters, the authors' formula
        self.clusters, clusters_source = _clusters(spec, model_dir, config.vocab_size - 1)

        if "hidden" in self.kinds:
            self.layers = _layers(spec["layer"], config.n_layer)
        elif spec["layer"] != defaults("models", "igpt")["layer"]:  # the entry's own, not the default filled in
            raise InputError("layer", "applies to `output: hidden` only; the logits come after the last layer")
        else:
            self.layers = []
        self.outputs = outputs(spec)
        self.dims = {name: config.vocab_size - 1 if name == "logits" else config.n_embd for name in self.outputs}
        self.dim = self.dims[self.outputs[0]] if len(self.outputs) == 1 else None  # encode_images' (one output)
        self.info = {
            "adapter": "igpt",
            **source,
            "architecture": self.model.__class__.__name__,
            "config": spec.get("config") or None,
            "output": output,
            "layers": self.layers or None,
            "norm": self.norm,
            "n_px": self.n_px,
            "clusters": clusters_source,
            "preprocess": f"square RGB shrunk to {self.n_px}x{self.n_px} (OpenCV INTER_AREA), x / 127.5 - 1, "
                          f"nearest of {len(self.clusters)} colour clusters",
            "dim": self.dim or self.dims,
            "device": str(self.device),
            "precision": self.precision,
            "dtype": "float32",
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        }
        log.info("igpt: %s (%s weights), %s, norm %s, dim %s, on %s", self.info["model_id"], source["weights"],
                 ", ".join(self.outputs), self.norm, self.info["dim"], self.device)

    def tokens(self, pixels):
        """int64 (n, n_px²) colour-cluster indices of uint8 (n, H, W, 3) square RGB images, row by row."""
        pixels = self._check(pixels)
        if pixels.shape[1] != self.n_px:
            pixels = area_resize(pixels, self.n_px)
        return quantize(pixels.reshape(len(pixels), self.n_px ** 2, 3), self.clusters)

    def _check(self, pixels):
        return square_images(pixels, self.n_px)

    def encode_outputs(self, pixels):
        """{output name: float32 (n, dim)} for uint8 (n, H, W, 3) square RGB images, one pass per batch."""
        pixels = self._check(pixels)
        out = {name: np.empty((len(pixels), self.dims[name]), dtype=np.float32) for name in self.outputs}
        sos = self.model.config.vocab_size - 1
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(pixels), self.batch_size):
                batch = torch.from_numpy(self.tokens(pixels[start:start + self.batch_size])).to(self.device)
                context = torch.cat([torch.full_like(batch[:, :1], sos), batch[:, :-1]], dim=1)
                for name, vectors in zip(self.outputs, self._forward(context)):
                    out[name][start:start + len(batch)] = vectors.float().cpu().numpy()
        return out

    def encode_images(self, pixels):
        """float32 (n, dim) vectors of uint8 (n, H, W, 3) square RGB images (one configured output)."""
        if len(self.outputs) != 1:
            raise InputError("layer", f"{len(self.outputs)} outputs configured ({', '.join(self.outputs)}); "
                                      "encode_outputs returns them all")
        return self.encode_outputs(pixels)[self.outputs[0]]

    def _forward(self, context):
        """One (b, dim) tensor per output (``self.outputs``' order), running only the blocks they need."""
        t = self.model.transformer
        positions = torch.arange(context.shape[1], device=self.device)
        h = t.wte(context) + t.wpe(positions)[None]
        pooled = []
        for i, block in enumerate(t.h):  # h: the hidden states entering block i
            if i in self.layers:
                pooled.append(t.h[i + 1].ln_1(h).mean(dim=1))
            if "logits" not in self.kinds and i == self.layers[-1]:
                return pooled
            h = block(h)[0]
        return pooled + [self.model.lm_head(t.ln_f(h[:, -1]))]


def quantize(x, clusters):
    """int64 (..., m) index of the nearest of ``clusters`` (k, 3) for each uint8 pixel of ``x`` (..., m, 3).

    The authors' arithmetic (``color_quantize_np`` on ``normalize_img``): pixels in float64 scaled to
    [-1, 1], squared distances expanded as |a|² - 2ab + |b|² with |b|² in the clusters' own dtype, so
    near-ties fall the same way.
    """
    a = x.reshape(-1, 3) / 127.5 - 1
    d = np.sum(np.square(a), axis=1)[:, None] - 2 * (a @ clusters.T) + np.sum(np.square(clusters), axis=1)[None, :]
    return np.argmin(d, axis=1).reshape(x.shape[:-1])


def _layers(value, n_layer):
    layers = value if isinstance(value, list) else [value]
    if not layers or not all(isinstance(l, int) and not isinstance(l, bool) for l in layers):
        raise InputError("layer", f"expected a layer index or a list of them, got {value!r}")
    bad = [l for l in layers if not 0 <= l <= n_layer - 2]
    if bad:
        raise InputError("layer", f"{bad} out of range: 0..{n_layer - 2} for {n_layer} blocks (layer l is "
                                  "normalised by block l + 1's layer norm)")
    return sorted(set(layers))


def _clusters(spec, model_dir, n):
    """(float32 (n, 3) colour clusters, provenance) from the entry's ``clusters`` key."""
    value = spec.get("clusters")
    if value == "random":
        seed = int(spec["seed"])
        clusters = np.random.default_rng(seed).uniform(-1, 1, (n, 3)).astype(np.float32)
        return clusters, {"source": "random", "seed": seed}
    if value is None:
        if model_dir is None:
            raise InputError("clusters", "a random-weight or checkpoint model needs `clusters`: a .npy or .json "
                                         "file, or `random`")
        path = Path(model_dir) / "preprocessor_config.json"
        if not path.is_file():
            raise InputError(model_dir, "has no preprocessor_config.json with the colour clusters; set `clusters`")
    else:
        path = Path(value)
        if not path.is_file():
            raise InputError(path, "colour clusters file not found")
    if path.suffix == ".npy":
        try:
            clusters = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise InputError(path, f"not a readable .npy array ({e})") from e
    elif path.suffix == ".json":
        try:
            clusters = np.asarray(json.loads(path.read_text())["clusters"], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(path, f"no `clusters` list of RGB triples ({e})") from e
    else:
        raise InputError(path, "expected a .npy array or a .json image processor configuration")
    if clusters.shape != (n, 3) or not np.issubdtype(clusters.dtype, np.floating) or not np.isfinite(clusters).all():
        raise InputError(path, f"expected {n} finite RGB clusters, shape ({n}, 3) (the model's vocabulary less the "
                               f"start token), got {clusters.dtype} {clusters.shape}")
    return clusters, {"source": str(path), "sha256": sha256_file(path)}
