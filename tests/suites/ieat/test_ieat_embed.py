"""iEAT embedding stores from the images (vlbias.suites.ieat): text sets of cross-modal tests in the
image model's joint space, several iGPT outputs from one pass, each output a store of its own."""

import h5py
import numpy as np
import pytest
import yaml
from PIL import Image

from vlbias.associate import run_test
from vlbias.errors import InputError
from vlbias.images.store import build_image_store, store_name
from vlbias.io.cache import RecordCache, fingerprint
from vlbias.io.stimuli import load_stimulus
from vlbias.io.store import read_provenance, read_set
from vlbias.models import build
from vlbias.suites.ieat import embed_image_store, output_store, text_sets
from vlbias.suites.stores import image_files

CLIP = {"adapter": "open_clip", "arch": "ViT-B-32", "weights": "random", "seed": 0, "device": "cpu",
        "model_cfg": {"embed_dim": 16,
                      "vision_cfg": {"image_size": 32, "patch_size": 8, "width": 32, "layers": 2, "head_width": 16},
                      "text_cfg": {"width": 32, "heads": 2, "layers": 1}}}
IGPT = {"adapter": "igpt", "weights": "random", "seed": 0, "clusters": "random", "device": "cpu",
        "config": {"n_embd": 32, "n_layer": 4, "n_head": 2, "n_positions": 64, "vocab_size": 17}}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """An image store at 32 px of three toy categories (one of them empty) and its manifest."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    entries = []
    for category, n in {"toy/flower": 3, "toy/insect": 2, "toy/none": 0}.items():
        (root / category).mkdir(parents=True)
        for i in range(n):
            path = root / category / f"img{i}.png"
            Image.fromarray(rng.integers(0, 256, (40, 36, 3), dtype=np.uint8)).save(path)
            entries.append({"category": category, "file": path.name, "path": path})
    entries.append({"category": "toy/none", "file": "gone.jpg", "path": None, "reason": "not obtained"})
    build_image_store(entries, root / "store.h5", 32, crop="top-left", resample="area")
    return root / "store.h5"


def stimulus(tmp_path, sets, level="cross-modal"):
    doc = {"id": "mixed", "name": "Mixed", "suite": "ieat", "level": level,
           **{s: {"label": s, **({"category": v} if isinstance(v, str) else {"items": v})} for s, v in sets.items()}}
    (tmp_path / "mixed.yaml").write_text(yaml.safe_dump(doc))
    return load_stimulus(tmp_path / "mixed.yaml")


def test_store_names_say_size_crop_resampling_and_decoder():
    assert store_name(32, "top-left", "area", "opencv") == "32px-top-left-area-opencv"
    assert store_name(224, "center", "bicubic", "pil") == "224px-center-bicubic-pil"


def test_text_sets_of_a_cross_modal_test_join_the_image_store(images, tmp_path):
    test = stimulus(tmp_path, {"X": "toy/flower", "Y": "toy/insect", "A": ["joy", "love"], "B": ["pain", "hate"]})
    assert text_sets([test]) == {"mixed/A": ["joy", "love"], "mixed/B": ["pain", "hate"]}
    encoder = build(CLIP)
    out = tmp_path / "clip.h5"
    with RecordCache(tmp_path / "cache" / fingerprint(encoder.info)) as cache:
        embed_image_store(images, encoder, out, {"model_id": "tiny"}, cache, stimuli=[test])
    a, ids = read_set(out, "mixed/A")
    assert ids == ["joy", "love"]
    np.testing.assert_allclose(a, encoder.encode_texts(["joy", "love"]), atol=1e-6)
    x, x_ids = read_set(out, "toy/flower")
    with h5py.File(images, "r") as f:
        pixels = f["toy/flower/pixels"][()]
    assert x_ids == ["img0.png", "img1.png", "img2.png"]
    np.testing.assert_allclose(x, encoder.encode_images(pixels), atol=1e-6)
    assert read_set(out, "toy/none")[0].shape == (0, 16)
    assert read_provenance(out)["n"] == {"toy/flower": 3, "toy/insect": 2, "toy/none": 0, "mixed/A": 2, "mixed/B": 2}
    row = run_test(test, out, "tiny", n_samples=100, seed=0)
    assert row["status"] == "ok" and (row["n_x"], row["n_a"]) == (3, 2) and np.isfinite(row["d"])
    # a rerun meets the images and texts in the cache: nothing reaches the model
    encoder.encode_images = encoder.encode_texts = None
    with RecordCache(tmp_path / "cache" / fingerprint(encoder.info)) as cache:
        embed_image_store(images, encoder, tmp_path / "again.h5", {"model_id": "tiny"}, cache, stimuli=[test])
        assert cache.hits == 9 and cache.misses == 0
    np.testing.assert_array_equal(read_set(tmp_path / "again.h5", "mixed/B")[0], read_set(out, "mixed/B")[0])


def test_text_sets_need_a_text_tower(images, tmp_path):
    test = stimulus(tmp_path, {"X": ["rose", "tulip"], "Y": ["ant", "wasp"], "A": "toy/flower", "B": "toy/insect"})
    with pytest.raises(InputError, match=r"adapter igpt: has no text tower for the text sets mixed/X, mixed/Y"):
        embed_image_store(images, build({**IGPT, "layer": 1}), tmp_path / "igpt.h5", {}, stimuli=[test])


def test_several_outputs_from_one_pass_each_a_store(images, tmp_path):
    encoder = build({**IGPT, "layer": [0, 2], "output": ["hidden", "logits"]})
    combined = tmp_path / "igpt.h5"
    with RecordCache(tmp_path / "cache" / fingerprint(encoder.info)) as cache:
        embed_image_store(images, encoder, combined, {"model_id": "tiny igpt"}, cache)
    with h5py.File(images, "r") as f:
        pixels = f["toy/insect/pixels"][()]
    for output, spec in {"layer0": {"layer": 0}, "layer2": {"layer": 2}, "logits": {"output": "logits"}}.items():
        output_store(combined, output, tmp_path / f"{output}.h5")
        vectors, ids = read_set(tmp_path / f"{output}.h5", "toy/insect")
        alone = build({**IGPT, **spec}).encode_images(pixels)
        np.testing.assert_allclose(vectors, alone, atol=1e-5)
        assert ids == ["img0.png", "img1.png"]
        assert read_set(tmp_path / f"{output}.h5", "toy/none")[0].shape == (0, 16 if output == "logits" else 32)
        prov = read_provenance(tmp_path / f"{output}.h5")
        assert prov["output"] == output and prov["dim"] == alone.shape[1] and prov["model_id"] == "tiny igpt"
        assert prov["n"] == {"toy/flower": 3, "toy/insect": 2, "toy/none": 0}
    with pytest.raises(InputError, match=r"igpt.h5: no output 'layer1' \(it holds: layer0, layer2, logits\)"):
        output_store(combined, "layer1", tmp_path / "layer1.h5")
    # the cache keeps each image's outputs together: a rerun computes nothing
    encoder.encode_outputs = None
    with RecordCache(tmp_path / "cache" / fingerprint(encoder.info)) as cache:
        embed_image_store(images, encoder, tmp_path / "again.h5", {}, cache)
        assert cache.hits == 5 and cache.misses == 0


def test_image_files_in_store_order(tmp_path):
    (tmp_path / "m.tsv").write_text("category\tfile\tsha256\nc/a\tz.jpg\t\nc/b\tb.jpg\t\nc/a\ta.png\t\n")
    assert image_files(tmp_path / "m.tsv") == {"c/a": ["a.png", "z.jpg"], "c/b": ["b.jpg"]}
