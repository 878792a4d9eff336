"""CLIP-style models from open_clip (OpenAI CLIP, OpenCLIP, SigLIP, ...: any ``open_clip.list_models()`` arch).

Both towers, into one joint space: ``encode_images`` (the image tower) and ``encode_texts`` (the
text tower), so an association test may take image targets with text attributes, or the reverse.

Config entry keys:
    arch          open_clip architecture name, e.g. "ViT-B-32", "RN50"
    weights, exactly one of:
      pretrained  an open_clip pretrained tag ("openai", "laion2b_s34b_b79k", ...): its file fetched and
                  verified by vlbias.weights, built with the tag's QuickGELU and preprocessing
      checkpoint  a local state_dict file: .safetensors, or a torch.save file read with
                  weights_only=True (pickled objects other than tensors are refused)
      weights     ``random``, with ``seed`` (default 0): random weights, for tests and offline smoke
                  runs (the key every family uses; the former ``random_init: true`` is refused, naming it)
    model_cfg     for an open_clip arch: dict merged into its config (one level deep: a ``vision_cfg``
                  given here updates the arch's ``vision_cfg``); for any other ``arch`` name: the whole
                  architecture (embed_dim, vision_cfg, text_cfg), e.g. a tiny model for tests
    preprocess    dict overriding the image preprocessing (mean, std, interpolation); a checkpoint
                  or random init otherwise gets open_clip's defaults (OpenAI mean/std, bicubic)
    layer         the text tower's states read: "last" (the default, as CLIP) or "penultimate" (those of the
                  block before the last, through the same final LayerNorm, end-of-text pooling and
                  projection; a specification curve's layer axis)
    tokenizer     the open_clip tokenizer of the text tower, a name for ``open_clip.get_tokenizer``
                  (default: ``arch``'s own; OpenAI's BPE ships with open_clip, Hugging Face
                  tokenizers of other archs need the network or the Hugging Face cache: they are
                  not fetched ahead by vlbias.weights)
    batch_size, device, threads, precision   see vlbias.runtime
    model_id, revision            recorded in ``.info`` (default: arch, and the tag's source)
"""

import logging
import pickle
from pathlib import Path

import numpy as np
import open_clip
import torch
import torchvision
from open_clip.transformer import QuickGELU
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from vlbias.errors import InputError
from vlbias.images.decode import square_images
from vlbias.io.checkpoints import read_state_dict, refuse_unusable_values, some
from vlbias.io.fetch import sha256_file
from vlbias.models import register
from vlbias.models.open_clip_config import DEFINED, model_config
from vlbias.registry import one_weights_source, weights_label
from vlbias.runtime import autocast, hidden_layer, precision, runtime
from vlbias.weights import fetched

log = logging.getLogger(__name__)

@register("open_clip")
class OpenClipEncoder:
    def __init__(self, spec):
        arch, model_cfg = spec.get("arch"), spec.get("model_cfg") or {}
        base, model_kwargs = model_config(arch, model_cfg)
        if "random_init" in spec:  # the config check says so too (the schema's family: renamed)
            raise InputError("random_init", "no longer read; write `weights: random` instead")
        one_weights_source(spec, f"arch '{arch}'", "pretrained", "an open_clip tag")
        tag, checkpoint = spec.get("pretrained"), spec.get("checkpoint")
        self.device, self.batch_size = runtime(spec)
        self.precision = precision(spec)
        create = dict(force_preprocess_cfg=spec.get("preprocess"), **model_kwargs)

        seed, path, revision, commit = None, None, spec.get("revision"), None
        if got := fetched(spec, "pretrained"):  # the tag's file fetched ahead (vlbias.weights): no network
            path, tag, tag_cfg, commit = Path(tag), got["request"], got["config"], got["commit"]
            model = _from_file(arch, path, tag_cfg, create)
            revision = revision or got["origin"]
        elif tag is not None:
            raise InputError(f"{arch} pretrained '{tag}'", "an open_clip tag loads only fetched and verified: build "
                                                           "the spec that vlbias.weights.prepare returns")
        elif checkpoint is not None:
            path = Path(checkpoint)
            if not path.is_file():
                raise InputError(checkpoint, "checkpoint file not found")
            state = read_state_dict(path)  # before building the model: a refused file fails fast
            model = open_clip.create_model(arch, **create)
            try:
                missing, unexpected = model.load_state_dict(state, strict=False)
            except RuntimeError as e:  # torch reports shape mismatches even when not strict
                raise InputError(path, f"does not fit the configured model: {_mismatch(e)}") from None
            if missing or unexpected:
                raise InputError(path, f"does not fit the configured model: missing {some(missing)}, "
                                       f"unexpected {some(unexpected)}")
            refuse_unusable_values(path, {k: v.is_floating_point() for k, v in state.items()}, model.state_dict())
        else:
            seed = int(spec["seed"])
            # a private RNG stream: the weights depend on the seed alone, and the caller's RNG is untouched
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                model = open_clip.create_model(arch, **create)

        self.model = model.eval().requires_grad_(False).to(self.device)
        pp = open_clip.get_model_preprocess_cfg(self.model)
        size = pp["size"]
        self.size = [size, size] if isinstance(size, int) else list(size)
        self.interpolation = InterpolationMode(pp["interpolation"])
        self.mean = torch.tensor(pp["mean"], dtype=torch.float32, device=self.device).view(1, 3, 1, 1)
        self.std = torch.tensor(pp["std"], dtype=torch.float32, device=self.device).view(1, 3, 1, 1)
        self.dim = int({**base, **model_kwargs}["embed_dim"])
        self.tokenizer_name = spec.get("tokenizer") or arch
        if not (self.tokenizer_name in open_clip.list_models() or self.tokenizer_name in DEFINED
                or self.tokenizer_name.startswith(("hf-hub:", "local-dir:"))):
            # open_clip would fall back to OpenAI's tokenizer without a word
            raise InputError(f"tokenizer '{self.tokenizer_name}'", "not an open_clip model name (see open_clip."
                                                                   "list_models()), hf-hub:<id> or local-dir:<path>")
        self._tokenizer = None  # built on the first encode_texts: image-only runs never need it
        self.layer = spec.get("layer") or "last"
        tower = getattr(self.model, "text", self.model)  # CustomTextCLIP's text tower, or CLIP itself
        self._text_transformer = getattr(tower, "transformer", None)  # its blocks: `resblocks`
        if self.layer == "penultimate" and len(getattr(self._text_transformer, "resblocks", ())) < 2:
            raise InputError("layer 'penultimate'", f"{arch}'s text tower ({type(tower).__name__}) has no two open_clip "
                                                    "transformer blocks to stop before the last")
        self.info = {
            "adapter": "open_clip",
            "model_id": spec.get("model_id") or arch,
            "arch": arch,
            "model_cfg": model_cfg or None,
            "pretrained": tag,
            "weights_file": str(path) if path else None,
            "weights_sha256": sha256_file(path) if path else None,
            "revision": revision,
            "commit": commit,
            "weights": weights_label(spec),
            "seed": seed,
            # what the model runs, whether from the arch, the tag or model_cfg
            "quick_gelu": any(isinstance(m, QuickGELU) for m in self.model.modules()),
            "preprocess": {"size": self.size, "mean": list(pp["mean"]), "std": list(pp["std"]),
                           "interpolation": pp["interpolation"]},
            "tokenizer": self.tokenizer_name,
            # the layer only where it is not the last: the caches of the entries written before the axis stay valid
            **({"layer": self.layer} if self.layer != "last" else {}),
            "context_length": int(self.model.context_length),
            "dim": self.dim,
            "device": str(self.device),
            "precision": self.precision,
            "dtype": "float32",
            "versions": {"open_clip": open_clip.__version__, "torch": torch.__version__,
                         "torchvision": torchvision.__version__},
        }
        # (open_clip itself logs "initialized randomly" before a checkpoint is loaded into the model)
        log.info("%s: %s weights from %s, dim %d, on %s", arch, self.info["weights"],
                 path or f"seed {seed}", self.dim, self.device)

    def preprocess(self, pixels):
        """uint8 (n, H, W, 3) tensor -> float32 (n, 3, size, size), as the model was trained on."""
        x = pixels.permute(0, 3, 1, 2)
        if list(x.shape[-2:]) != self.size:
            # resized as uint8 (rounded, clamped) like open_clip's PIL transform; the bicubic kernels differ slightly
            x = TF.resize(x, self.size, interpolation=self.interpolation, antialias=True)
        x = x.to(torch.float32) / 255.0
        return (x - self.mean) / self.std

    def encode_images(self, pixels):
        """float32 (n, dim) unnormalised image embeddings of uint8 (n, H, W, 3) square RGB images."""
        pixels = square_images(pixels)
        out = np.empty((len(pixels), self.dim), dtype=np.float32)
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(pixels), self.batch_size):
                batch = torch.from_numpy(np.ascontiguousarray(pixels[start:start + self.batch_size]))
                emb = self.model.encode_image(self.preprocess(batch.to(self.device)))
                assert emb.shape == (len(batch), self.dim), emb.shape
                out[start:start + len(batch)] = emb.float().cpu().numpy()
        return out


    def encode_texts(self, texts):
        """float32 (n, dim) unnormalised text embeddings of a list of strings, in the images' joint space.

        Texts longer than the model's context are truncated by open_clip's tokenizer, as in training.
        """
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InputError("texts", "expected a list of strings")
        texts = list(texts)
        if self._tokenizer is None:
            try:
                self._tokenizer = open_clip.get_tokenizer(self.tokenizer_name,
                                                          context_length=int(self.model.context_length))
            except Exception as e:  # unknown names, hub errors: the tokenizer is not to be had
                raise InputError(f"tokenizer '{self.tokenizer_name}'", f"open_clip could not build it ({e})") from e
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(texts), self.batch_size):
                tokens = self._tokenizer(texts[start:start + self.batch_size]).to(self.device)
                vocab = getattr(self.model, "vocab_size", None)
                if vocab is not None and int(tokens.max()) >= vocab:
                    raise InputError(f"tokenizer '{self.tokenizer_name}'",
                                     f"gives token ids up to {int(tokens.max())}, beyond the text tower's {vocab} "
                                     "embeddings")
                with hidden_layer(self._text_transformer, "resblocks", self.layer):
                    emb = self.model.encode_text(tokens)
                assert emb.shape == (len(tokens), self.dim), emb.shape
                out[start:start + len(tokens)] = emb.float().cpu().numpy()
        return out



def _from_file(arch, path, tag_cfg, create):
    """The model of an open_clip tag from its file, fetched ahead: what open_clip builds for the tag
    (its QuickGELU, which weights trained with it must run with, and its preprocessing, the entry's
    ``preprocess`` over them), loaded strictly by open_clip's loader (weights only)."""
    preprocess = {k: v for k, v in tag_cfg.items() if k != "quick_gelu"} | (create["force_preprocess_cfg"] or {})
    try:
        return open_clip.create_model(arch, pretrained=str(path), force_quick_gelu=tag_cfg.get("quick_gelu", False),
                                      **{**create, "force_preprocess_cfg": preprocess})
    except pickle.UnpicklingError as e:
        raise InputError(path, f"refused: not a weights-only torch checkpoint ({str(e).splitlines()[0]})") from None
    except RuntimeError as e:  # open_clip loads strictly: missing, unexpected or mis-shaped parameters
        raise InputError(path, f"does not fit {arch}: {_mismatch(e)}") from None


def _mismatch(error):
    """torch's load_state_dict error, on one line."""
    return " ".join(str(error).split())
