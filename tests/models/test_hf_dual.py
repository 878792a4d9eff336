"""The transformers dual encoders (vlbias.models.hf_dual): tiny random CLIP and SigLIP models from the
real config classes give what the documented transformers calls give, whatever the batch."""

import numpy as np
import pytest
import torch
from PIL import Image
from helpers.tiny import HF_DUAL_CLASSES as CLASSES
from helpers.tiny import HF_DUAL_CONFIGS as CONFIGS
from helpers.tiny import HF_DUAL_TEXT as TEXT
from helpers.tiny import HF_DUAL_VISION as VISION
from helpers.tiny import TINY_DUAL, TINY_DUAL_CONTEXT
from helpers.tiny import tiny_dual_dir
from transformers import AutoProcessor

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.models.hf_dual import write_processor

# the padding each model card's example uses
PADDING = {"clip": True, "siglip": "max_length"}
SHORT = ["rose", "a tulip", "wasp!"]  # fewer tokens than the tiny text towers' 16 positions, either tokenizer
TEXTS = [*SHORT, "This is a tulip in the garden.", "a very long sentence that runs past the sixteen positions of "
         "the tiny text tower, so it is truncated"]


@pytest.fixture(scope="module", params=["clip", "siglip"])
def tiny(request, tmp_path_factory):
    """(architecture, model directory, its encoder at batch size 4)."""
    directory = tiny_dual_dir(tmp_path_factory.mktemp(request.param), request.param)
    return request.param, directory, build({"adapter": "hf_dual", "path": str(directory), "batch_size": 4,
                                            "device": "cpu"})


def pixels(n, size=40, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def test_the_vectors_are_what_the_documented_calls_give(tiny):
    architecture, directory, encoder = tiny
    model = CLASSES[architecture][0].from_pretrained(directory).eval()
    processor = AutoProcessor.from_pretrained(directory)
    images = pixels(5)
    with torch.inference_mode():
        expected_images = model.get_image_features(**processor(images=[Image.fromarray(p) for p in images],
                                                               return_tensors="pt")).pooler_output
        # short texts alone too: with a text of the full length in the batch, both paddings agree
        expected_texts = [model.get_text_features(**processor(text=texts, padding=PADDING[architecture],
                                                              truncation=True, return_tensors="pt")).pooler_output
                          for texts in (SHORT, TEXTS)]
    np.testing.assert_allclose(encoder.encode_images(images), expected_images.numpy(), rtol=1e-5, atol=1e-6)
    for texts, expected in zip((SHORT, TEXTS), expected_texts):
        np.testing.assert_allclose(encoder.encode_texts(texts), expected.numpy(), rtol=1e-5, atol=1e-6)
    assert encoder.info["architecture"] == type(model).__name__ and encoder.info["weights"] == "pretrained"
    assert len(encoder.info["weights_sha256"]) == 64 and "tokenizer.json" in encoder.info["processor_sha256"]


def test_a_vector_does_not_depend_on_the_batch(tiny):
    _, _, encoder = tiny
    images = pixels(6, seed=1)
    many = encoder.encode_images(images), encoder.encode_texts(TEXTS)
    encoder.batch_size = 1
    try:
        one = encoder.encode_images(images), encoder.encode_texts(TEXTS)
    finally:
        encoder.batch_size = 4
    for a, b in zip(one, many):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("architecture", ["clip", "siglip", "siglip2", "blip", "flava"])
def test_the_text_towers_penultimate_layer_is_a_tower_one_block_shorter(tmp_path, architecture):
    """layer penultimate: the text states of the block before the last, through the same final norm, pooling
    and projection: the encoding of the same weights in a text tower built without its last block."""
    config = {**CONFIGS, **TINY_DUAL}[architecture]
    processor = write_processor(tmp_path, architecture, 32, TINY_DUAL_CONTEXT.get(architecture, 16))
    spec = {"adapter": "hf_dual", "architecture": architecture, "weights": "random", "processor": str(processor),
            "device": "cpu", "config": {**config, "text_config": {**config["text_config"], "num_hidden_layers": 2}}}
    full, penultimate, shorter = build(spec), build({**spec, "layer": "penultimate"}), build({**spec, "config": config})
    _, unexpected = shorter.model.load_state_dict(full.model.state_dict(), strict=False)
    assert unexpected and all(".1." in k for k in unexpected)  # the text tower's second block alone
    np.testing.assert_allclose(penultimate.encode_texts(SHORT), shorter.encode_texts(SHORT), rtol=1e-5, atol=1e-6)
    assert not np.allclose(penultimate.encode_texts(SHORT), full.encode_texts(SHORT), atol=1e-4)
    np.testing.assert_array_equal(penultimate.encode_images(pixels(2)), full.encode_images(pixels(2)))


@pytest.mark.parametrize("architecture", ["clip", "siglip"])
def test_random_weights_are_the_config_class_model_of_the_seed(tmp_path, architecture):
    processor = write_processor(tmp_path, architecture, VISION["image_size"], TEXT["max_position_embeddings"])
    spec = {"adapter": "hf_dual", "architecture": architecture, "weights": "random", "seed": 3,
            "config": CONFIGS[architecture], "processor": str(processor), "device": "cpu"}
    encoder = build(spec)
    model_class, config_class = CLASSES[architecture]
    torch.manual_seed(3)
    model = model_class(config_class(**CONFIGS[architecture]))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), encoder.model.state_dict().values()))
    assert encoder.info["seed"] == 3 and encoder.info["padding"] == {"clip": "longest", "siglip": "max_length"}[
        architecture]
    assert encoder.encode_texts(["rose"]).shape == encoder.encode_images(pixels(1)).shape == (1, encoder.dim)


def test_a_checkpoint_loads_into_the_architecture_it_names(tmp_path):
    from safetensors.torch import save_file

    processor = write_processor(tmp_path / "processor", "clip", VISION["image_size"], TEXT["max_position_embeddings"])
    spec = {"adapter": "hf_dual", "architecture": "clip", "config": CONFIGS["clip"], "processor": str(processor),
            "device": "cpu"}
    random = build({**spec, "weights": "random", "seed": 5})
    save_file(random.model.state_dict(), tmp_path / "clip.safetensors")
    loaded = build({**spec, "checkpoint": str(tmp_path / "clip.safetensors")})
    assert loaded.info["weights"] == "checkpoint" and len(loaded.info["weights_sha256"]) == 64
    np.testing.assert_array_equal(loaded.encode_texts(TEXTS), random.encode_texts(TEXTS))


@pytest.mark.parametrize("change,message", [
    ({"architecture": None}, "hf_dual entry: `weights: random` and `checkpoint` need `architecture`"),
    ({"processor": None}, "processor: `weights: random` and `checkpoint` need `processor:`"),
    ({"architecture": "align"}, "architecture 'align': must be one of clip, siglip, siglip2, blip, flava"),
    ({"weights": None}, "hf_dual entry: set `model_id` (with `revision`), `path`, `checkpoint` or `weights: random`"),
])
def test_an_entry_without_what_it_needs_is_refused(tmp_path, change, message):
    spec = {"adapter": "hf_dual", "architecture": "clip", "weights": "random", "config": CONFIGS["clip"],
            "processor": str(tmp_path), "device": "cpu", **change}
    with pytest.raises(InputError) as e:
        build({k: v for k, v in spec.items() if v is not None})
    assert str(e.value).startswith(message)


def test_the_entrys_padding_is_what_the_texts_are_padded_to(tmp_path):
    """SigLIP's text tower pools the last position, a pad token: the padding changes its vectors."""
    processor = write_processor(tmp_path, "siglip", VISION["image_size"], TEXT["max_position_embeddings"])
    spec = {"adapter": "hf_dual", "architecture": "siglip", "weights": "random", "config": CONFIGS["siglip"],
            "processor": str(processor), "device": "cpu"}
    default, longest = build(spec), build({**spec, "padding": "longest"})
    assert (default.info["padding"], longest.info["padding"]) == ("max_length", "longest")
    assert not np.allclose(default.encode_texts(SHORT), longest.encode_texts(SHORT), atol=1e-4)
    with torch.inference_mode():
        inputs = longest.processor(text=SHORT, padding="longest", truncation=True, return_tensors="pt")
        expected = longest.model.get_text_features(**inputs).pooler_output
    np.testing.assert_allclose(longest.encode_texts(SHORT), expected.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError, match="padding 'max': must be one of longest, max_length"):
        build({**spec, "padding": "max"})


@pytest.mark.parametrize("vocab_size,refused", [(49407, True), (49408, False)])
def test_token_ids_beyond_the_text_towers_embeddings_are_refused(tmp_path, vocab_size, refused):
    """CLIP's tokenizer ends every text with id 49407: a text tower of 49407 embeddings has none for it."""
    processor = write_processor(tmp_path, "clip", VISION["image_size"], TEXT["max_position_embeddings"])
    config = {**CONFIGS["clip"], "text_config": {**TEXT, "vocab_size": vocab_size}}
    encoder = build({"adapter": "hf_dual", "architecture": "clip", "weights": "random", "config": config,
                     "processor": str(processor), "device": "cpu"})
    if refused:
        with pytest.raises(InputError, match=r"gives token ids up to 49407, beyond the text tower's 49407 "
                                             "embeddings"):
            encoder.encode_texts(SHORT)
    else:
        assert encoder.encode_texts(SHORT).shape == (3, encoder.dim)
