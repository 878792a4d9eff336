"""The iGPT adapter: the iEAT authors' tokens, pooled layers and logits, on tiny random ImageGPT models.

The differential tests against the authors' own functions run when ``VLBIAS_IEAT_REFERENCE``
names a folder holding their package (ryansteed/ieat at 4d7639bf: ``ieat/utils.py``,
``ieat/models.py``); see docs/ieat.md for the patches their code needs on current libraries.
"""

import json
import re
import sys

import numpy as np
import pytest

from helpers import checkout
from helpers.tiny import IGPT_CLUSTERS as N_CLUSTERS
from helpers.tiny import TINY_IGPT as TINY

from vlbias.errors import InputError
from vlbias.images.decode import area_resize
from vlbias.models import build
from vlbias.models.families import outputs




def pixels(n, size=8, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def authors_layer_norm(x, weight, eps):
    # ieat/models.py ln_mod, literally
    import torch

    return x / torch.sqrt(torch.std(x, axis=-1, unbiased=False, keepdim=True) ** 2 + eps) * weight


def hf_outputs(encoder, images, norm):
    """transformers' own forward pass over the authors' context, the layer norm swapped when ``norm`` is std."""
    import torch
    from transformers.models.imagegpt import modeling_imagegpt

    tokens = torch.from_numpy(encoder.tokens(images))
    sos = encoder.model.config.vocab_size - 1
    context = torch.cat([torch.full((len(tokens), 1), sos), tokens[:, :-1]], dim=1)
    original = modeling_imagegpt.ImageGPTLayerNorm.forward
    try:
        if norm == "std":
            modeling_imagegpt.ImageGPTLayerNorm.forward = lambda self, x: authors_layer_norm(x, self.weight, self.eps)
        with torch.no_grad():
            model = encoder.model
            # the adapter's instances were switched to the std class; run a plain copy of the weights
            plain = modeling_imagegpt.ImageGPTForCausalImageModeling(model.config).eval()
            plain.load_state_dict(model.state_dict())
            return plain, plain(context, output_hidden_states=True)
    finally:
        modeling_imagegpt.ImageGPTLayerNorm.forward = original


@pytest.mark.parametrize("norm", ["std", "rms"])
def test_pooled_layers_and_logits_equal_transformers_forward(norm):
    import torch

    enc = build({**TINY, "layer": [0, 2], "norm": norm})
    x = pixels(3)
    ours = enc.encode_outputs(x)
    assert list(ours) == ["layer0", "layer2"] and ours["layer0"].shape == (3, 32)
    assert enc.dims == {"layer0": 32, "layer2": 32} and enc.dim is None
    with torch.no_grad():
        model, out = hf_outputs(enc, x, norm)
        for layer in (0, 2):
            block = model.transformer.h[layer + 1].ln_1
            if norm == "std":
                expected = authors_layer_norm(out.hidden_states[layer], block.weight, block.eps).mean(dim=1)
            else:
                expected = block(out.hidden_states[layer]).mean(dim=1)
            np.testing.assert_allclose(ours[f"layer{layer}"], expected.numpy(), atol=1e-5)
    logits = build({**{k: v for k, v in TINY.items() if k != "layer"}, "output": "logits", "norm": norm})
    assert logits.dim == N_CLUSTERS
    np.testing.assert_allclose(logits.encode_images(x), out.logits[:, -1].numpy(), atol=1e-5)


def test_the_two_layer_norms_differ():
    x = pixels(2)
    assert not np.allclose(build(TINY).encode_images(x), build({**TINY, "norm": "rms"}).encode_images(x), atol=1e-3)


def test_one_pass_batches_and_layers_agree():
    x = pixels(5)
    both = build({**TINY, "layer": [2, 0], "batch_size": 2}).encode_outputs(x)
    for layer in (0, 2):
        alone = build({**TINY, "layer": layer, "batch_size": 5}).encode_images(x)
        np.testing.assert_allclose(both[f"layer{layer}"], alone, atol=1e-5)
    assert build(TINY).encode_images(pixels(0)).shape == (0, 32)


def test_hidden_layers_and_logits_from_one_pass():
    x = pixels(3)
    spec = {**TINY, "layer": [2, 0], "output": ["hidden", "logits"]}
    enc = build(spec)
    assert enc.outputs == outputs(spec) == ["layer0", "layer2", "logits"]
    assert enc.dims == {"layer0": 32, "layer2": 32, "logits": N_CLUSTERS} and enc.info["dim"] == enc.dims
    both = enc.encode_outputs(x)
    hidden = build({**TINY, "layer": [0, 2]}).encode_outputs(x)
    logits = build({**{k: v for k, v in TINY.items() if k != "layer"}, "output": "logits"}).encode_images(x)
    for layer in ("layer0", "layer2"):
        np.testing.assert_allclose(both[layer], hidden[layer], atol=1e-6)
    np.testing.assert_allclose(both["logits"], logits, atol=1e-6)


def test_outputs_are_named_from_the_entry_alone():
    assert outputs({"adapter": "igpt"}) == ["layer20"]
    assert outputs({"adapter": "igpt", "output": "logits"}) == ["logits"]
    assert outputs({"adapter": "igpt", "layer": [20, 10, 20]}) == ["layer10", "layer20"]
    assert outputs({"adapter": "open_clip", "arch": "ViT-B-32"}) == []


def test_quantize_by_hand():
    from vlbias.models.igpt import quantize

    clusters = np.array([[-1, -1, -1], [1, 1, 1], [1, -1, -1], [0, 0, 0]], dtype=np.float32)
    x = np.array([[[0, 0, 0], [255, 255, 255], [250, 10, 0], [128, 127, 128], [64, 64, 64], [191, 191, 191]]],
                 dtype=np.uint8)
    # 64 -> -0.498: nearer 0 than -1; 191 -> 0.498: nearer 0 than 1
    np.testing.assert_array_equal(quantize(x, clusters), [[0, 1, 2, 3, 3, 3]])


def test_tokens_shrink_larger_images_with_area_averaging():
    enc = build(TINY)
    big = pixels(2, size=24)
    np.testing.assert_array_equal(enc.tokens(big), enc.tokens(area_resize(big, 8)))
    assert enc.tokens(big).shape == (2, 64) and enc.tokens(big).max() < N_CLUSTERS


def test_clusters_from_a_model_directory_npy_or_json(tmp_path):
    import torch

    enc = build(TINY)
    model_dir = tmp_path / "model"
    enc.model.save_pretrained(model_dir)
    clusters = np.random.default_rng(5).uniform(-1, 1, (N_CLUSTERS, 3)).astype(np.float32)
    (model_dir / "preprocessor_config.json").write_text(json.dumps({"clusters": clusters.tolist()}))
    np.save(tmp_path / "kmeans_centers.npy", clusters)
    x = pixels(3)
    from_dir = build({"adapter": "igpt", "path": str(model_dir), "layer": 1, "device": "cpu"})
    np.testing.assert_array_equal(from_dir.clusters, clusters)
    assert from_dir.info["clusters"]["source"].endswith("preprocessor_config.json")
    from_npy = build({"adapter": "igpt", "path": str(model_dir), "layer": 1, "device": "cpu",
                      "clusters": str(tmp_path / "kmeans_centers.npy")})
    np.testing.assert_array_equal(from_dir.encode_images(x), from_npy.encode_images(x))
    # same weights as the random model it was saved from (saving and loading changed nothing)
    random_same_clusters = build(TINY)
    random_same_clusters.clusters = clusters
    np.testing.assert_allclose(random_same_clusters.encode_images(x), from_dir.encode_images(x), atol=1e-6)
    assert from_dir.info["weights"] == "pretrained" and from_dir.info["weights_sha256"]
    assert torch.equal(from_dir.model.transformer.wte.weight, enc.model.transformer.wte.weight)


def test_checkpoint_round_trip(tmp_path):
    import hashlib

    import safetensors.torch

    source = build({**TINY, "seed": 3})
    path = tmp_path / "igpt.safetensors"
    safetensors.torch.save_file({k: v.contiguous() for k, v in source.model.state_dict().items()}, path)
    spec = {k: v for k, v in TINY.items() if k not in ("weights", "seed")}
    enc = build({**spec, "checkpoint": str(path), "seed": 0})
    x = pixels(2)
    source.clusters = enc.clusters
    np.testing.assert_allclose(enc.encode_images(x), source.encode_images(x), atol=1e-6)
    assert enc.info["weights_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert enc.info["norm"] == "std" and enc.info["layers"] == [1] and enc.info["n_px"] == 8


def test_bad_entries_are_refused(tmp_path):
    with pytest.raises(InputError, match=r"layer: \[3\] out of range: 0\.\.2"):
        build({**TINY, "layer": 3})
    with pytest.raises(InputError, match="layer: expected a layer index"):
        build({**TINY, "layer": "20"})
    with pytest.raises(InputError, match="output 'pooled'"):
        build({**TINY, "output": "pooled"})
    with pytest.raises(InputError, match=r"output \['hidden', 'hidden'\]"):
        build({**TINY, "output": ["hidden", "hidden"]})
    with pytest.raises(InputError, match="norm 'layer'"):
        build({**TINY, "norm": "layer"})
    with pytest.raises(InputError, match="layer: applies to `output: hidden` only"):
        build({**TINY, "output": "logits"})
    with pytest.raises(InputError, match="clusters: a random-weight or checkpoint model needs"):
        build({k: v for k, v in TINY.items() if k != "clusters"})
    np.save(tmp_path / "wrong.npy", np.zeros((8, 3), np.float32))
    with pytest.raises(InputError, match=r"wrong.npy: expected 16 finite RGB clusters"):
        build({**TINY, "clusters": str(tmp_path / "wrong.npy")})
    with pytest.raises(InputError, match="config: n_positions 60 is not a square"):
        build({**TINY, "config": {**TINY["config"], "n_positions": 60}})
    with pytest.raises(InputError, match="config: not ImageGPTConfig keys: n_px"):
        build({**TINY, "config": {"n_px": 8}})
    with pytest.raises(InputError, match=r"igpt entry: `model_id: \(its default\)` names remote weights"):
        build({"adapter": "igpt"})
    enc = build({**TINY, "layer": [0, 1]})
    with pytest.raises(InputError, match=r"layer: 2 outputs configured \(layer0, layer1\); encode_outputs"):
        enc.encode_images(pixels(1))
    with pytest.raises(InputError, match="pixels: 4x4 images are smaller than the model's 8x8"):
        enc.encode_outputs(pixels(1, size=4))
    with pytest.raises(InputError, match="pixels: expected uint8"):
        enc.encode_outputs(pixels(1).astype(np.float32))


# --- the authors' code --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def authors():
    """The iEAT authors' package (``ieat.utils``, ``ieat.models``) from VLBIAS_IEAT_REFERENCE."""
    folder = checkout("VLBIAS_IEAT_REFERENCE", "a folder holding the iEAT authors' package "
                      "(ryansteed/ieat@4d7639bf: ieat/utils.py, ieat/models.py)", "ieat/utils.py")
    pytest.importorskip("cv2", reason="the authors' resize needs OpenCV (opencv-python-headless)")
    sys.path.insert(0, str(folder))
    import ieat.utils

    return ieat


@pytest.mark.mirror
def test_tokens_equal_the_authors_on_the_stimulus_images(authors, mirror):
    """Each mirror category's images through their resize + normalize_img + color_quantize_np and ours."""
    from vlbias.images.decode import prepare
    from vlbias.models.igpt import quantize

    utils = authors.utils
    clusters = np.random.default_rng(0).uniform(-1, 1, (512, 3)).astype(np.float32)
    paths = sorted(p for p in (mirror / "ieat/data/experiments").glob("*/*/*")
                   if p.suffix in (".jpg", ".jpeg", ".png", ".webp"))
    assert len(paths) > 600
    differ = []
    for path in paths:
        theirs = utils.color_quantize_np(utils.normalize_img(utils.resize(32, [str(path)])), clusters)
        ours = quantize(prepare(path, 32, crop="top-left", resample="area", decoder="opencv"), clusters)
        if not np.array_equal(theirs, ours.reshape(-1)):
            differ.append((path.name, int((theirs != ours.reshape(-1)).sum())))
    print(f"{len(paths) - len(differ)} of {len(paths)} images: token sequences equal; differing: {differ}")
    assert not differ  # the same decoder (cv2.imread) and resizing


def test_vectors_equal_the_authors_extractors(authors, tmp_path):
    """Identical random weights in their GPT-2 port (OpenAIExtractor, LogitExtractor) and ours."""
    import safetensors.torch
    import torch

    models = pytest.importorskip("ieat.models", reason="the authors' ieat.models needs tensorflow, "
                                                      "tensorflow_hub and pandas importable")
    np.save(tmp_path / "kmeans_centers.npy",
            np.random.default_rng(1).uniform(-1, 1, (N_CLUSTERS, 3)).astype(np.float32))
    models.GPTExtractor.MODELS["tiny"] = (32, 2, 4)  # n_embd, n_head, n_layer
    hidden = models.OpenAIExtractor("igpt", "tiny", str(tmp_path), str(tmp_path), 8, from_cache=False)
    logit = models.LogitExtractor("igpt-logit", "tiny", str(tmp_path), str(tmp_path), 8, from_cache=False)
    torch.manual_seed(0)
    reference = models.ImageGPT2LMHeadModel(hidden.config).eval()
    with torch.no_grad():
        for name, p in reference.named_parameters():  # ln_mod's weights start uninitialised
            p.copy_(torch.randn_like(p) * (0.5 if p.ndim > 1 else 1.0) + (1.0 if name.endswith("ln_1.weight") else 0))
    hidden.model = logit.model = reference
    path = tmp_path / "weights.safetensors"
    # (older GPT-2 code kept its causal mask as a persistent buffer, attn.bias)
    safetensors.torch.save_file({k: v.contiguous() for k, v in reference.state_dict().items()
                                 if not re.search(r"\.attn\.(masked_)?bias$", k)}, path)
    spec = {"adapter": "igpt", "checkpoint": str(path), "clusters": str(tmp_path / "kmeans_centers.npy"),
            "device": "cpu", "config": TINY["config"]}
    x = pixels(4, size=8, seed=3)
    samples = models.color_quantize_np(models.normalize_img(x), hidden.clusters).reshape(x.shape[:-1])
    with torch.no_grad():
        for layer in (0, 1, 2):
            theirs = hidden._extract_context(samples, False, l=layer)
            ours = build({**spec, "layer": layer}).encode_images(x)
            print(f"layer {layer}: max abs difference {np.abs(theirs - ours).max():.2e}")
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)  # float32 noise
        theirs = logit._extract_context(samples, False)
    ours = build({**spec, "output": "logits"}).encode_images(x)
    print(f"logits: max abs difference {np.abs(theirs - ours).max():.2e} (largest |logit| {np.abs(theirs).max():.1f})")
    # float32 noise after four blocks and ln_f: their own code in float32 and float64 differs by 4e-5 here
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
