"""The joint spaces beside CLIP and SigLIP (vlbias.models.hf_dual; docs/joint-spaces.md): SigLIP 2, BLIP's
image-text contrastive space and FLAVA's contrastive embeddings, tiny random models from the real config
classes, give what the models' own documented calls give (max abs difference at most 1e-6), whatever the
batch; SigLIP 2 reads lower-cased texts; a checkpoint without the projection heads is refused."""

import numpy as np
import pytest
import torch
from helpers.tiny import TINY_DUAL, TINY_DUAL_CONTEXT
from PIL import Image
from safetensors.torch import load_file, save_file
from transformers import (AutoProcessor, BlipConfig, BlipForImageTextRetrieval, FlavaConfig, FlavaForPreTraining,
                          FlavaModel, Siglip2Config, Siglip2Model)

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.models.hf_dual import write_processor

# what each model directory holds: FLAVA's is FlavaForPreTraining, as facebook/flava-full
SAVED = {"siglip2": (Siglip2Model, Siglip2Config), "blip": (BlipForImageTextRetrieval, BlipConfig),
         "flava": (FlavaForPreTraining, FlavaConfig)}
SHORT = ["Rose", "a tulip", "WASP!"]
TEXTS = [*SHORT, "This is a Tulip in the garden.", "a very long sentence that runs past the sixteen positions of "
         "the tiny SigLIP 2 text tower, so it is truncated there"]
PRE_TRAINING_HEADS = ("itm_head.", "mim_head.", "mlm_head.", "mmm_image_head.", "mmm_text_head.")


def pixels(n, size=40, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def processor_dir(directory, architecture):
    return write_processor(directory, architecture, 32, TINY_DUAL_CONTEXT[architecture])


def random_model(architecture, seed=0):
    model_class, config_class = SAVED[architecture]
    config = {**TINY_DUAL[architecture], **({"init_codebook": False} if architecture == "flava" else {})}
    if architecture == "blip":  # as vlbias builds a random BLIP (vlbias.models.hf.RANDOM_BASE): it sees the image
        config["vision_config"] = {**config["vision_config"], "initializer_range": 0.02}
    torch.manual_seed(seed)
    return model_class(config_class(**config)).eval()


@pytest.fixture(scope="module", params=list(SAVED))
def tiny(request, tmp_path_factory):
    """(architecture, model directory (save_pretrained: the model and its processor), its encoder at batch size 4)."""
    architecture = request.param
    directory = tmp_path_factory.mktemp(architecture)
    random_model(architecture).save_pretrained(directory)
    processor_dir(directory, architecture)
    return architecture, directory, build({"adapter": "hf_dual", "architecture": architecture, "path": str(directory),
                                           "batch_size": 4, "device": "cpu"})


def documented(architecture, directory, images, texts):
    """(image vectors, text vectors, and for BLIP the forward's ITC scores) of the model's own calls."""
    processor = AutoProcessor.from_pretrained(directory)
    images = [Image.fromarray(p) for p in images]
    with torch.inference_mode():
        if architecture == "siglip2":  # its model card: lower-cased texts, padded to the full length
            model = Siglip2Model.from_pretrained(directory).eval()
            text_inputs = processor(text=[t.lower() for t in texts], padding="max_length", max_length=16,
                                    truncation=True, return_tensors="pt")
            return (model.get_image_features(**processor(images=images, return_tensors="pt")).pooler_output,
                    model.get_text_features(**text_inputs).pooler_output, None)
        if architecture == "flava":  # FlavaModel from the pre-training checkpoint, as facebook/flava-full loads
            model = FlavaModel.from_pretrained(directory).eval()
            return (model.get_image_features(**processor(images=images, return_tensors="pt")).pooler_output[:, 0],
                    model.get_text_features(**processor(text=texts, padding=True, return_tensors="pt")).pooler_output[
                        :, 0], None)
        # BLIP: its retrieval forward's ITC path, the projections it normalises read by hooks
        model = BlipForImageTextRetrieval.from_pretrained(directory).eval()
        seen = {}
        hooks = [layer.register_forward_hook(lambda m, i, out, name=name: seen.__setitem__(name, out))
                 for name, layer in (("image", model.vision_proj), ("text", model.text_proj))]
        inputs = processor(images=images, text=texts, padding=True, return_tensors="pt")
        out = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                    pixel_values=inputs["pixel_values"], use_itm_head=False)
        for hook in hooks:
            hook.remove()
        normalize = torch.nn.functional.normalize
        return normalize(seen["image"], dim=-1), normalize(seen["text"], dim=-1), out.itm_score


def max_diff(a, b):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def test_the_vectors_are_what_the_documented_calls_give(tiny):
    architecture, directory, encoder = tiny
    images = pixels(4)  # one batch of the encoder's 4: the same batch as the reference's
    expected_images, expected_texts, scores = documented(architecture, directory, images, TEXTS[:4])
    ours_images, ours_texts = encoder.encode_images(images), encoder.encode_texts(TEXTS[:4])
    diffs = max_diff(ours_images, expected_images), max_diff(ours_texts, expected_texts)
    print(f"{architecture}: max abs diff images {diffs[0]:.3g}, texts {diffs[1]:.3g}")
    assert max(diffs) <= 1e-6
    if scores is not None:  # BLIP's forward with use_itm_head=False: the cosines of our vectors
        assert max_diff(ours_images @ ours_texts.T, scores) <= 1e-6
        np.testing.assert_allclose(np.linalg.norm(ours_images, axis=1), 1, atol=1e-6)
    assert not np.allclose(ours_images[0], ours_images[1], atol=1e-4)  # the image is seen
    assert encoder.info["architecture"] == ("FlavaModel" if architecture == "flava" else SAVED[architecture][0].__name__)
    assert encoder.info["normalized"] == (architecture == "blip")


def test_a_vector_does_not_depend_on_its_batch(tiny):
    """Batches of 4 (a last one of 2) against one at a time; BLIP's and FLAVA's texts padded to the longest."""
    _, _, encoder = tiny
    images, many = pixels(6, seed=1), (encoder.encode_images(pixels(6, seed=1)), encoder.encode_texts(TEXTS))
    encoder.batch_size = 1
    try:
        for a, b in zip((encoder.encode_images(images), encoder.encode_texts(TEXTS)), many):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    finally:
        encoder.batch_size = 4


def test_only_flavas_pre_training_heads_are_dropped_as_its_schema_declares(tiny):
    """FLAVA's directory is a FlavaForPreTraining (facebook/flava-full's class), the others' their model
    whole (BLIP's ITM head too: its retrieval model's)."""
    architecture, _, encoder = tiny
    dropped = encoder.info.get("unused_parameters", [])
    if architecture == "flava":
        assert {name.split(".")[0] + "." for name in dropped} == set(PRE_TRAINING_HEADS)
    else:
        assert dropped == []


@pytest.mark.parametrize("architecture", list(SAVED))
def test_random_weights_are_the_config_class_model_of_the_seed(tmp_path, architecture):
    encoder = build({"adapter": "hf_dual", "architecture": architecture, "weights": "random", "seed": 3,
                     "config": TINY_DUAL[architecture], "processor": str(processor_dir(tmp_path, architecture)),
                     "device": "cpu"})
    model = random_model(architecture, seed=3)
    model = model.flava if architecture == "flava" else model
    assert encoder.model.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(a, model.state_dict()[k]) for k, a in encoder.model.state_dict().items())
    assert encoder.encode_texts(["rose"]).shape == encoder.encode_images(pixels(1)).shape == (1, encoder.dim)
    assert encoder.dim == 8 if architecture != "siglip2" else 16


# the projection heads each contrastive space reads (BLIP: its ITC's; FLAVA: FlavaModel's)
HEADS = {"blip": ["vision_proj.weight", "text_proj.bias"], "flava": ["image_projection.weight", "text_projection.bias"]}


@pytest.mark.parametrize("architecture,head", [(a, h) for a, heads in HEADS.items() for h in heads])
def test_a_checkpoint_without_a_projection_head_is_refused(tmp_path, architecture, head):
    spec = {"adapter": "hf_dual", "architecture": architecture, "config": TINY_DUAL[architecture],
            "processor": str(processor_dir(tmp_path / "processor", architecture)), "device": "cpu"}
    state = build({**spec, "weights": "random"}).model.state_dict()
    save_file(state, tmp_path / "whole.safetensors")
    whole = build({**spec, "checkpoint": str(tmp_path / "whole.safetensors")})
    assert whole.info["weights"] == "checkpoint"
    save_file({k: v for k, v in state.items() if k != head}, tmp_path / "headless.safetensors")
    with pytest.raises(InputError, match=f"does not fit the configured model: missing {head}"):
        build({**spec, "checkpoint": str(tmp_path / "headless.safetensors")})


@pytest.mark.parametrize("architecture", list(HEADS))
def test_a_model_directory_without_a_projection_head_is_refused(tmp_path, architecture):
    """Not filled with random weights: transformers' from_pretrained would initialise the missing head."""
    random_model(architecture).save_pretrained(tmp_path)
    processor_dir(tmp_path, architecture)
    head = ("flava." if architecture == "flava" else "") + HEADS[architecture][0]
    state = load_file(tmp_path / "model.safetensors")
    save_file({k: v for k, v in state.items() if k != head}, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(InputError, match=f"does not hold a .*: missing {HEADS[architecture][0]}"):
        build({"adapter": "hf_dual", "architecture": architecture, "path": str(tmp_path), "device": "cpu"})


def test_a_blip_directory_needs_its_architecture(tmp_path):
    """AutoModel builds BlipModel from BLIP's config: another model than the retrieval checkpoint's."""
    random_model("blip").save_pretrained(tmp_path)
    processor_dir(tmp_path, "blip")
    with pytest.raises(InputError, match=r"does not hold a BlipModel \(its config.json declares "
                                         r"BlipForImageTextRetrieval\)"):
        build({"adapter": "hf_dual", "path": str(tmp_path), "device": "cpu"})


def test_siglip2_reads_lower_cased_texts_unless_told_otherwise(tmp_path):
    spec = {"adapter": "hf_dual", "architecture": "siglip2", "weights": "random", "config": TINY_DUAL["siglip2"],
            "processor": str(processor_dir(tmp_path, "siglip2")), "device": "cpu"}
    default, cased = build(spec), build({**spec, "lowercase": False})
    assert (default.info["lowercase"], cased.info["lowercase"]) == (True, False)
    np.testing.assert_array_equal(default.encode_texts(["Rose", "WASP!"]), default.encode_texts(["rose", "wasp!"]))
    np.testing.assert_array_equal(default.encode_texts(["rose"]), cased.encode_texts(["rose"]))
    # the byte-level stand-in keeps the case: upper-case letters are other tokens
    assert not np.allclose(cased.encode_texts(["Rose"]), cased.encode_texts(["rose"]), atol=1e-4)
    assert default.info["padding"] == "max_length"


def test_a_fixed_resolution_siglip2_entry_lower_cases_when_told(tmp_path):
    """google/siglip2-base-patch16-224 and the like are SiglipModels: not lower-cased by default, their entries say so."""
    config = {"text_config": TINY_DUAL["siglip2"]["text_config"],
              "vision_config": {**TINY_DUAL["siglip2"]["vision_config"], "image_size": 32, "patch_size": 8}}
    spec = {"adapter": "hf_dual", "architecture": "siglip", "weights": "random", "config": config, "device": "cpu",
            "processor": str(write_processor(tmp_path, "siglip", 32, 16))}
    default, lowered = build(spec), build({**spec, "lowercase": True})
    assert (default.info["lowercase"], lowered.info["lowercase"]) == (False, True)
    np.testing.assert_array_equal(lowered.encode_texts(["Rose"]), default.encode_texts(["rose"]))
    assert not np.allclose(default.encode_texts(["Rose"]), default.encode_texts(["rose"]), atol=1e-4)
