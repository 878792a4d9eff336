"""Dual encoders through transformers (CLIP, SigLIP, ...): an image and a text tower into one joint space.

    encoder = build({"adapter": "hf_dual", "model_id": "openai/clip-vit-base-patch32", "revision": "<commit>"})
    encoder.encode_images(pixels)   # uint8 (n, H, W, 3) square RGB -> float32 (n, encoder.dim)
    encoder.encode_texts(texts)     # list[str] -> float32 (n, encoder.dim), in the images' space

Any transformers model with ``get_image_features`` and ``get_text_features`` (``CLIPModel``,
``SiglipModel``, and others loaded through ``AutoModel``), with its own processor (``AutoProcessor``).
The vectors are exactly what the documented calls give, unnormalised (not L2-normalised: the models
normalise only inside their contrastive logits; the association tests use cosine, which ignores the norm):

    model.get_image_features(**processor(images=[PIL images], return_tensors="pt"))
    model.get_text_features(**processor(text=texts, padding=..., truncation=True, max_length=..., return_tensors="pt"))

(the pooled, projected output: transformers 5 returns it as the output's ``pooler_output``, 4.x as
the tensor itself). Images go to the processor as PIL images, so it resizes, crops and normalises
them as for any photograph; the store's square images are resized by it to its own size.

Text padding (``padding``): ``max_length`` for SigLIP (``siglip``, ``siglip2``), as its model card
says it was trained: its text tower pools the last position, a pad token, so the padding changes the
vector; ``longest`` otherwise (CLIP pools its end-of-text token behind a causal mask: later padding
does not reach it). Texts longer than the text tower's positions are truncated.

Config entry keys (``adapter: hf_dual``):
    weights         the keys of vlbias.models.hf: ``model_id`` + ``revision`` (the model and its
                    processor files from the Hugging Face hub), a local ``path`` (a directory of
                    save_pretrained: config.json, the weights and the processor's files),
                    ``checkpoint`` or ``weights: random`` (+ ``seed``, ``config``); no default model
    architecture    ``clip`` or ``siglip``: the model class (CLIPModel, SiglipModel) and the config
                    class ``config`` overrides (CLIPConfig, SiglipConfig); required for ``weights:
                    random`` and ``checkpoint``, otherwise AutoModel reads config.json
    processor       a local directory with the processor's files (save_pretrained of the processor);
                    default: the model's own directory (``path`` or the hub download); required for
                    ``weights: random`` and ``checkpoint``
    padding         ``longest`` or ``max_length`` (default: see above)
    batch_size, device, threads, precision   see vlbias.runtime

Offline (tests, smoke runs, benchmarks), ``write_processor`` writes a processor directory of the
family's image processor and a tokenizer built without the hub: CLIP's own (OpenAI's BPE, which
open_clip ships), for SigLIP a byte-level stand-in (its own tokenizer is a SentencePiece model from
the hub, and needs the sentencepiece package).
"""

import gzip
import json
import logging
from pathlib import Path

import numpy as np
import torch
import transformers
from PIL import Image
from transformers import (AutoModel, AutoProcessor, CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor,
                          CLIPTokenizer, PreTrainedTokenizerFast, SiglipConfig, SiglipImageProcessor, SiglipModel,
                          SiglipProcessor)

from vlbias.errors import InputError
from vlbias.images.decode import square_images
from vlbias.io.checkpoints import refuse_custom_code
from vlbias.io.fetch import sha256_file
from vlbias.models import register
from vlbias.models.hf import load_model
from vlbias.runtime import autocast, precision, runtime

log = logging.getLogger(__name__)

ARCHITECTURES = {"clip": (CLIPModel, CLIPConfig), "siglip": (SiglipModel, SiglipConfig)}
PADDINGS = ("longest", "max_length")
# model types trained on texts padded to the full length (the SigLIP model card: padding="max_length")
MAX_LENGTH_PADDED = ("siglip", "siglip2")
# what a processor's save_pretrained writes (image processor, tokenizer), hashed into .info (a hub model's
# are fetched with it: its schema's weights declaration)
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "spiece.model")


@register("hf_dual")
class DualEncoder:
    def __init__(self, spec):
        self.device, self.batch_size = runtime(spec)
        self.precision = precision(spec)
        architecture = spec.get("architecture")
        if architecture is not None and architecture not in ARCHITECTURES:
            raise InputError(f"architecture '{architecture}'", f"must be one of {', '.join(ARCHITECTURES)}")
        own_weights = spec.get("weights") is not None or spec.get("checkpoint")
        if own_weights and architecture is None:
            raise InputError("hf_dual entry", "`weights: random` and `checkpoint` need `architecture` "
                                              f"({', '.join(ARCHITECTURES)}): the model class to build")
        if not (own_weights or spec.get("path") or spec.get("model_id")):
            raise InputError("hf_dual entry", "set `model_id` (with `revision`), `path`, `checkpoint` or "
                                              "`weights: random`")
        model_class, config_class = ARCHITECTURES.get(architecture, (AutoModel, None))
        model, source, model_dir = load_model(spec, "hf_dual", model_class, config_class, {})
        if not (callable(getattr(model, "get_image_features", None))
                and callable(getattr(model, "get_text_features", None))):
            raise InputError(f"'{source['model_id']}'", f"{type(model).__name__} has no get_image_features and "
                                                        "get_text_features: not a dual encoder")
        self.model = model.eval().requires_grad_(False).to(self.device)
        self.processor_dir, self.processor = _processor(spec.get("processor") or model_dir)
        config = self.model.config
        self.text_config = getattr(config, "text_config", config)
        # CLIP-like models project both towers to projection_dim; SigLIP's towers share the vision width
        self.dim = int(getattr(config, "projection_dim", None) or config.vision_config.hidden_size)
        self.context_length = int(self.text_config.max_position_embeddings)
        self.padding = spec.get("padding") or ("max_length" if config.model_type in MAX_LENGTH_PADDED else "longest")
        if self.padding not in PADDINGS:
            raise InputError(f"padding '{self.padding}'", f"must be one of {', '.join(PADDINGS)}")
        image_processor, tokenizer = self.processor.image_processor, self.processor.tokenizer
        self.info = {
            "adapter": "hf_dual",
            **source,
            "architecture": type(self.model).__name__,
            "config": spec.get("config") or None,
            "processor_dir": str(self.processor_dir),
            "processor_sha256": {p.name: sha256_file(p) for p in sorted(self.processor_dir.iterdir())
                                 if p.name in PROCESSOR_FILES},
            "preprocess": {"image_processor": type(image_processor).__name__,
                           **{k: v for k, v in image_processor.to_dict().items() if k != "image_processor_type"}},
            "tokenizer": type(tokenizer).__name__,
            "padding": self.padding,
            "context_length": self.context_length,
            "normalized": False,
            "dim": self.dim,
            "device": str(self.device),
            "precision": self.precision,
            "dtype": "float32",
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        }
        log.info("hf_dual: %s (%s, %s weights), processor %s, dim %d, on %s", source["model_id"],
                 self.info["architecture"], source["weights"], self.processor_dir, self.dim, self.device)

    def _features(self, out, n):
        """The (n, dim) vectors of a get_*_features call: a tensor (transformers 4) or its pooler_output (5)."""
        vectors = out if isinstance(out, torch.Tensor) else out.pooler_output
        if tuple(vectors.shape) != (n, self.dim):
            raise InputError(f"'{self.info['model_id']}'", f"gives vectors of shape {tuple(vectors.shape)}, "
                                                           f"not ({n}, {self.dim})")
        return vectors.float().cpu().numpy()

    def encode_images(self, pixels):
        """float32 (n, dim) unnormalised image embeddings of uint8 (n, H, W, 3) square RGB images."""
        pixels = square_images(pixels)
        out = np.empty((len(pixels), self.dim), dtype=np.float32)
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(pixels), self.batch_size):
                images = [Image.fromarray(p) for p in pixels[start:start + self.batch_size]]
                inputs = self.processor(images=images, return_tensors="pt").to(self.device)
                out[start:start + len(images)] = self._features(self.model.get_image_features(**inputs), len(images))
        return out

    def encode_texts(self, texts):
        """float32 (n, dim) unnormalised text embeddings of a list of strings, in the images' joint space."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InputError("texts", "expected a list of strings")
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        vocab = getattr(self.text_config, "vocab_size", None)
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(texts), self.batch_size):
                batch = texts[start:start + self.batch_size]
                inputs = self.processor(text=batch, padding=self.padding, truncation=True,
                                        max_length=self.context_length, return_tensors="pt").to(self.device)
                if vocab is not None and int(inputs["input_ids"].max()) >= vocab:
                    raise InputError(f"processor {self.processor_dir}",
                                     f"gives token ids up to {int(inputs['input_ids'].max())}, beyond the text "
                                     f"tower's {vocab} embeddings")
                out[start:start + len(batch)] = self._features(self.model.get_text_features(**inputs), len(batch))
        return out


def _processor(directory):
    """(directory, the processor AutoProcessor loads from it), with an image processor and a tokenizer."""
    if directory is None:
        raise InputError("processor", "`weights: random` and `checkpoint` need `processor:`, a directory with "
                                      "the processor's files (its save_pretrained)")
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(directory, "no such processor directory")
    refuse_custom_code(directory)
    try:
        processor = AutoProcessor.from_pretrained(directory, local_files_only=True, trust_remote_code=False)
    except Exception as e:  # missing files, a tokenizer backend not installed (SigLIP's needs sentencepiece)
        raise InputError(directory, f"transformers could not load a processor from it ({e})") from e
    if not (hasattr(processor, "image_processor") and hasattr(processor, "tokenizer")):
        raise InputError(directory, f"its processor ({type(processor).__name__}) lacks an image processor or a "
                                    "tokenizer")
    return directory, processor


def write_processor(directory, architecture, image_size, context_length):
    """Write a processor for ``architecture`` (clip, siglip) to ``directory``, without the hub: the
    family's image processor class with its defaults at ``image_size``, and a tokenizer of
    ``context_length`` tokens: CLIP's own (the 49,408 ids of OpenAI's BPE, from open_clip's copy),
    for SigLIP a byte-level stand-in (258 ids: the 256 bytes, ``</s>`` closing every text and padding,
    ``<unk>``). Returns ``directory``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    directory = Path(directory)
    if architecture == "clip":
        from open_clip.tokenizer import default_bpe

        with gzip.open(default_bpe(), "rt", encoding="utf-8") as f:
            merges = [tuple(line.split()) for line in f.read().split("\n")[1:49152 - 256 - 2 + 1]]
        # OpenAI's vocabulary, in its order: the bytes, the bytes ending a word, the merges, the two specials
        symbols = list(bytes_to_unicode().values())
        vocab = [*symbols, *(s + "</w>" for s in symbols), *("".join(m) for m in merges),
                 "<|startoftext|>", "<|endoftext|>"]
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "vocab.json").write_text(json.dumps({token: i for i, token in enumerate(vocab)}))
        (directory / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        tokenizer = CLIPTokenizer(str(directory / "vocab.json"), str(directory / "merges.txt"),
                                  model_max_length=context_length)
        image_processor = CLIPImageProcessor(size={"shortest_edge": image_size},
                                             crop_size={"height": image_size, "width": image_size})
        processor = CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer)
    elif architecture == "siglip":
        vocab = {symbol: i for i, symbol in enumerate(bytes_to_unicode().values())}
        vocab |= {"</s>": len(vocab), "<unk>": len(vocab) + 1}
        bpe = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        bpe.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", vocab["</s>"])])
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, model_max_length=context_length, eos_token="</s>",
                                            pad_token="</s>", unk_token="<unk>")
        processor = SiglipProcessor(image_processor=SiglipImageProcessor(size={"height": image_size,
                                                                               "width": image_size}),
                                    tokenizer=tokenizer)
    else:
        raise InputError(f"architecture '{architecture}'", f"must be one of {', '.join(ARCHITECTURES)}")
    processor.save_pretrained(directory)
    return directory
