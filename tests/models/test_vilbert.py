"""ViLBERT (vlbias.models.vilbert): visual input, streams, levels, masks, loading; and against the originals.

Tiny randomly initialised models of the real layout (co-attention after language layers 1 and 2,
before vision layers 0 and 1, so both streams also end with layers of their own) and the real
bert-base-uncased WordPiece vocabulary. The differential tests need the original code: the folder
named by VLBIAS_VILBERT_REFERENCE holding checkouts ``vilbert_beta/`` (jiasenlu/vilbert_beta) and/or
``vilbert-multi-task/`` (facebookresearch/vilbert-multi-task); each is skipped when absent.
"""

import hashlib
import importlib
import importlib.util
import math
import sys
import types

import numpy as np
import pytest
import safetensors.torch
import torch
from helpers import checkout
from helpers.tiny import TINY_VL, VL_CAPTIONS, VL_WORDS, assert_batch_independent, random_visual
from helpers.vl import (assert_loads_as_saved, assert_mask_logprobs_are_distributions,
                        assert_text_masking_and_the_image_change_the_vector, checkpoint_entry, mixed_pairs,
                        other_regions, recorded, vl_regions)

from vlbias.errors import InputError
from vlbias.models import build
from vlbias.models.modeling_vilbert import ViLBertConfig
from vlbias.models.tokenization import encode_text
from vlbias.models.vl import LENGTH_BUCKET
from vlbias.models.vilbert import vilbert_inputs
from vlbias.visual import Visual
from vlbias.weights import prepare, unused

TINY = TINY_VL["vilbert"]
CONFIG = TINY["config"]
CAPTIONS, WORDS = VL_CAPTIONS, VL_WORDS


REGIONS = vl_regions()


@pytest.fixture(scope="module")
def encoder():
    return build(TINY)


def captured_inputs(encoder, fn):
    """Run ``fn`` and return what the vision embedding received: [(features, locations), ...]."""
    return recorded(encoder.model.bert.v_embeddings, fn)


# --- model and visual input -------------------------------------------------------------------

def test_state_dict_has_the_checkpoint_layout(encoder):
    state = encoder.model.state_dict()
    shapes = {
        "bert.embeddings.word_embeddings.weight": (30522, 32),
        "bert.embeddings.LayerNorm.weight": (32,),
        "bert.v_embeddings.image_embeddings.weight": (24, 2048),
        "bert.v_embeddings.image_location_embeddings.weight": (24, 5),
        "bert.encoder.layer.2.attention.self.query.weight": (32, 32),
        "bert.encoder.layer.2.output.LayerNorm.bias": (32,),
        "bert.encoder.v_layer.1.intermediate.dense.weight": (29, 24),
        "bert.encoder.c_layer.1.biattention.query1.weight": (16, 24),
        "bert.encoder.c_layer.1.biattention.value2.weight": (16, 32),
        "bert.encoder.c_layer.0.biOutput.dense1.weight": (24, 16),
        "bert.encoder.c_layer.0.biOutput.q_dense2.weight": (32, 16),
        "bert.encoder.c_layer.0.biOutput.LayerNorm2.weight": (32,),
        "bert.encoder.c_layer.0.v_output.dense.weight": (24, 29),
        "bert.encoder.c_layer.0.t_intermediate.dense.weight": (37, 32),
        "bert.t_pooler.dense.weight": (16, 32),
        "bert.v_pooler.dense.weight": (16, 24),
        "cls.predictions.transform.dense.weight": (32, 32),
        "cls.predictions.decoder.weight": (30522, 32),
        "cls.predictions.bias": (30522,),
        "cls.bi_seq_relationship.weight": (2, 16),
        "cls.imagePredictions.transform.LayerNorm.weight": (24,),
        "cls.imagePredictions.decoder.weight": (11, 24),
    }
    for name, shape in shapes.items():
        assert tuple(state[name].shape) == shape, name
    assert len(state) == 181
    # the masked-word decoder is the word-embedding matrix
    assert encoder.model.cls.predictions.decoder.weight is encoder.model.bert.embeddings.word_embeddings.weight
    with pytest.raises(InputError, match="v_biattention_id \\[0, 2\\] and t_biattention_id \\[1, 2\\] must be"):
        ViLBertConfig(**{**CONFIG, "v_biattention_id": [0, 2]})


def test_global_token_and_five_d_positions(encoder):
    for caption, r in zip(CAPTIONS, REGIONS):  # one pair per call: the pairs differ in shape, so in batch
        (features, locations), = captured_inputs(encoder, lambda: encoder.embed([caption], [r], "S"))
        j, k = 0, len(r.features)
        np.testing.assert_allclose(features[j, 0].numpy(), r.features.mean(axis=0), atol=1e-5)
        np.testing.assert_array_equal(features[j, 1:k + 1].numpy(), r.features)
        np.testing.assert_array_equal(locations[j, 0].numpy(), [0, 0, 1, 1, 1])
        x1, y1, x2, y2 = r.boxes_norm.T
        np.testing.assert_allclose(locations[j, 1:k + 1].numpy(),
                                   np.stack([x1, y1, x2, y2, (x2 - x1) * (y2 - y1)], axis=1), atol=1e-6)
        assert features.shape[1] == k + 1  # nothing padded


def test_regions_are_capped_at_max_regions(encoder):
    many = random_visual(50, 3)[0]
    capped = build({**TINY, "max_regions": 4})
    (features, locations), = captured_inputs(capped, lambda: capped.embed(["a dog"], [many], "S"))
    assert features.shape[1:] == (5, 2048)  # the global token and the 4 best regions
    np.testing.assert_allclose(features[0, 0].numpy(), many.features[:4].mean(axis=0), atol=1e-5)
    (features, _), = captured_inputs(encoder, lambda: encoder.embed(["a dog"], [many], "S"))
    assert features.shape[1:] == (37, 2048)  # default: 36, as ViLBERT's pre-training and Ross et al.'s loader
    with pytest.raises(InputError, match="max_regions: must be a positive integer"):
        build({**TINY, "max_regions": 0})


def test_image_masking_zeroes_person_regions_before_the_global_mean(encoder):
    for caption, r in zip(CAPTIONS, REGIONS):  # one pair per call: the pairs differ in shape, so in batch
        plain, masked = captured_inputs(encoder, lambda: (encoder.embed([caption], [r], "S"),
                                                          encoder.embed([caption], [r], "S", mask="I")))
        expected = np.where(r.is_person[:, None], 0, r.features)
        np.testing.assert_array_equal(masked[0][0, 1:].numpy(), expected)
        np.testing.assert_allclose(masked[0][0, 0].numpy(), expected.mean(axis=0), atol=1e-5)
        np.testing.assert_array_equal(plain[1].numpy(), masked[1].numpy())  # positions kept
    assert REGIONS[0].features[0].any()  # the caller's arrays are untouched
    s, i = encoder.embed(CAPTIONS, REGIONS, "S"), encoder.embed(CAPTIONS, REGIONS, "S", mask="I")
    assert np.abs(s[:2] - i[:2]).max(axis=1).min() > 1e-4
    np.testing.assert_array_equal(s[2], i[2])  # no person in the third image


def test_no_image_is_a_zero_region_on_the_whole_image(encoder):
    blank = Visual(np.zeros((1, 2048), np.float32), np.array([[0, 0, 1, 1]], np.float32))
    np.testing.assert_array_equal(encoder.mask_logprobs(["[MASK] is here."], None)[0],
                                  encoder.mask_logprobs(["[MASK] is here."], [blank])[0])
    (features, locations), = captured_inputs(encoder, lambda: encoder.embed(["a"], [None], "S"))
    assert not features.any()
    np.testing.assert_array_equal(locations[0].numpy(), [[0, 0, 1, 1, 1], [0, 0, 1, 1, 1]])
    assert encoder.info["no_image"] == encoder.no_image and "whole-image box" in encoder.no_image


# --- levels, streams and batching -------------------------------------------------------------

def streams(encoder, captions, regions):
    """Both streams' final states for the captions, straight from the model."""
    text = encode_text(encoder.tokenizer, captions, 512)
    _, feats, boxes, vmask, _ = encoder._batch(captions, regions, range(len(captions)), None, None, None)
    features, locations, image_mask = vilbert_inputs(feats, boxes, vmask)
    with torch.inference_mode():
        return encoder.model.bert(text.input_ids, features, locations, text.attention_mask, image_mask)


def test_levels_take_the_language_stream_and_ws_vector_adds_the_visual_one(encoder):
    language, vision = streams(encoder, CAPTIONS, REGIONS)
    s = encoder.embed(CAPTIONS, REGIONS, "S")
    c = encoder.embed(CAPTIONS, REGIONS, "C", words=WORDS)
    np.testing.assert_allclose(s, language[:, 0].numpy(), atol=1e-5)
    np.testing.assert_allclose(c, language[np.arange(3), [1, 2, 1]].numpy(), atol=1e-5)
    both = build({**TINY, "ws_vector": "language+visual"})
    assert both.output_dim("S") == both.output_dim("W") == 32 + 24 and both.output_dim("C") == 32
    joined = both.embed(CAPTIONS, REGIONS, "S")
    np.testing.assert_allclose(joined, np.concatenate([language[:, 0], vision[:, 0]], axis=1), atol=1e-5)
    np.testing.assert_allclose(both.embed(CAPTIONS, REGIONS, "C", words=WORDS), c, atol=1e-6)
    assert "vision stream's global token" in both.info["output"] and both.info["ws_vector"] == "language+visual"
    with pytest.raises(InputError, match="ws_vector 'visual': vilbert gives language, language\\+visual"):
        build({**TINY, "ws_vector": "visual"})


def test_batch_1_and_32_give_the_same_embeddings(encoder):
    captions, regions, words = mixed_pairs(33)  # one batch of 32 and a remainder
    cases = [("S", {}), ("C", {"words": words}), ("S", {"mask": "T", "mask_terms": WORDS}),
             ("C", {"mask": "I", "words": words})]
    assert_batch_independent(encoder, captions, regions, cases, batch_size=32)


def test_text_masking_and_the_image_change_the_embedding(encoder):
    assert_text_masking_and_the_image_change_the_vector(encoder, REGIONS, other_regions())


def test_mask_logprobs(encoder):
    full = assert_mask_logprobs_are_distributions(encoder, REGIONS[0])
    language, _ = streams(encoder, ["[MASK] is a nurse."], REGIONS[:1])
    with torch.inference_mode():
        logits = encoder.model.cls.predictions(language[0, 1])
    np.testing.assert_allclose(full[0][0], torch.log_softmax(logits, -1).numpy(), atol=1e-5)


# --- loading ----------------------------------------------------------------------------------

def test_checkpoints_load_strictly_from_a_file_or_a_url(encoder, tmp_path, http_server):
    expected = encoder.embed(CAPTIONS, REGIONS, "C", words=WORDS)
    # the original format: a plain torch.save of the state_dict, the tied decoder stored twice
    torch.save(encoder.model.state_dict(), tmp_path / "pytorch_model_9.bin")
    assert_loads_as_saved(TINY, tmp_path / "pytorch_model_9.bin", REGIONS, expected)
    digest = hashlib.sha256((tmp_path / "pytorch_model_9.bin").read_bytes()).hexdigest()
    safetensors.torch.save_model(encoder.model, str(tmp_path / "tiny.safetensors"))  # tied weights once
    assert_loads_as_saved(TINY, tmp_path / "tiny.safetensors", REGIONS, expected)
    # a URL is fetched once into <cache>/models (vlbias.weights), and checked against a pinned sha256
    http_server.routes["multi_task_model.bin"] = (tmp_path / "pytorch_model_9.bin").read_bytes()
    url = http_server.url("vilbert-multi-task/multi_task_model.bin")
    cache = tmp_path / "cache"
    from_url = build(prepare("grounded/vilbert", checkpoint_entry(TINY, url, sha256=digest), cache=cache))
    np.testing.assert_array_equal(from_url.embed(CAPTIONS, REGIONS, "C", words=WORDS), expected)
    assert from_url.info["checkpoint"] == url and from_url.info["weights_sha256"] == digest
    prepare("grounded/vilbert", checkpoint_entry(TINY, url, sha256=digest), cache=cache)  # kept under its sha256
    assert http_server.requests["multi_task_model.bin"] == 1 and len(list((cache / "models").iterdir())) == 1
    with pytest.raises(InputError, match="not the pinned 0000"):
        prepare("grounded/vilbert", checkpoint_entry(TINY, url, sha256="0000"), cache=tmp_path / "other")
    assert not (tmp_path / "other" / "models").exists() or not list((tmp_path / "other" / "models").iterdir())


def test_the_12_in_1_model_task_token_and_heads(encoder, tmp_path):
    spec = {**TINY, "config": {**CONFIG, "task_specific_tokens": True}}
    multi = build({**spec, "task_id": 9})
    state = multi.model.state_dict()
    assert state["bert.embeddings.task_embeddings.weight"].shape == (20, 32)
    # the task token sits after [CLS]; C still finds the word, and masked words their positions
    seen = []
    hook = multi.model.bert.encoder.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape))
    try:
        c = multi.embed(CAPTIONS, REGIONS, "C", words=WORDS)
        logp = multi.mask_logprobs(["[MASK] is a nurse."], REGIONS[:1])
    finally:
        hook.remove()
    # its own batch, padded to its length bucket
    assert seen[0][1] == encode_text(multi.tokenizer, CAPTIONS[:1], 512, multiple=LENGTH_BUCKET).input_ids.shape[1] + 1
    text = encode_text(multi.tokenizer, CAPTIONS, 512)
    _, feats, boxes, vmask, _ = multi._batch(CAPTIONS, REGIONS, range(len(CAPTIONS)), None, None, None)
    features, locations, image_mask = vilbert_inputs(feats, boxes, vmask)
    with torch.inference_mode():
        language, _ = multi.model.bert(text.input_ids, features, locations, text.attention_mask, image_mask,
                                       torch.full((3, 1), 9))
    np.testing.assert_allclose(c, language[np.arange(3), np.array([1, 2, 1]) + 1].numpy(), atol=1e-5)
    assert logp[0].shape == (1, 30522)
    # the 12-in-1 checkpoint's task heads are not loaded; anything else unexpected is an error
    heads = {pattern.replace("*", "weight"): torch.zeros(2) for pattern in unused("vilbert")}
    torch.save({**state, **heads}, tmp_path / "multi_task_model.bin")
    loaded = build(checkpoint_entry(spec, tmp_path / "multi_task_model.bin", task_id=9))
    np.testing.assert_array_equal(loaded.embed(CAPTIONS, REGIONS, "C", words=WORDS), c)
    torch.save({**state, "vil_other.weight": torch.zeros(2)}, tmp_path / "other.bin")
    with pytest.raises(InputError, match="unexpected vil_other.weight"):
        build(checkpoint_entry(spec, tmp_path / "other.bin", task_id=9))
    with pytest.raises(InputError, match="task_id: give a task_id exactly for a model with task_specific_tokens"):
        build(spec)
    with pytest.raises(InputError, match="task_id: give a task_id exactly"):
        build({**TINY, "task_id": 1})


def test_bad_entries(tmp_path):
    with pytest.raises(InputError, match="vilbert entry: needs `checkpoint:`.*dl.fbaipublicfiles.com"):
        build({"adapter": "vilbert", "device": "cpu"})
    with pytest.raises(InputError, match="absent.bin: checkpoint file not found"):
        build(checkpoint_entry(TINY, tmp_path / "absent.bin"))
    torch.save({"bert.embeddings.word_embeddings.weight": torch.zeros(30522, 32)}, tmp_path / "part.bin")
    with pytest.raises(InputError, match="part.bin: does not fit the configured model: missing "):
        build(checkpoint_entry(TINY, tmp_path / "part.bin"))
    with pytest.raises(InputError, match="config: not ViLBertConfig keys: v_hidden"):
        build({**TINY, "config": {"v_hidden": 3}})


# ---------------------------------------------------------------------------------------------
# Differential tests against the original code
# ---------------------------------------------------------------------------------------------

def import_reference(root, name):
    """The original ``vilbert/vilbert.py`` of the checkout ``root``, as the module ``<name>.vilbert``.

    Its ``vilbert/utils.py`` imports boto3, botocore, tensorboardX and torch._six (gone from
    torch 2) for downloads and logging, which the test does not use: stand-ins where absent.
    """
    stand_ins = {"boto3": {}, "botocore": {}, "botocore.exceptions": {"ClientError": Exception},
                 "tensorboardX": {"SummaryWriter": object}, "torch._six": {"inf": math.inf}}
    for module, attrs in stand_ins.items():
        try:
            importlib.import_module(module)
        except ImportError:
            sys.modules[module] = types.ModuleType(module)
            vars(sys.modules[module]).update(attrs)
    package = types.ModuleType(name)
    package.__path__ = [str(root / "vilbert")]
    sys.modules[name] = package
    spec = importlib.util.spec_from_file_location(f"{name}.vilbert", root / "vilbert" / "vilbert.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=["vilbert_beta", "vilbert-multi-task"])
def reference(request):
    root = checkout("VLBIAS_VILBERT_REFERENCE", "a folder with checkouts of jiasenlu/vilbert_beta (f0c9a2b2, as "
                    "vilbert_beta/) and/or facebookresearch/vilbert-multi-task (f22b84a9, as vilbert-multi-task/)",
                    f"{request.param}/vilbert/vilbert.py") / request.param
    return request.param, import_reference(root, "reference_" + request.param.replace("-", "_"))


def reference_inputs(pairs, max_regions):
    """vilbert_beta's image inputs (its _image_features_reader and batch collation) from pixel boxes."""
    n = max(min(len(pixels), max_regions) for _, pixels in pairs) + 1
    feats, locs, mask = np.zeros((len(pairs), n, 2048), np.float32), np.zeros((len(pairs), n, 5), np.float32), \
        np.zeros((len(pairs), n), np.int64)
    for j, (v, pixels) in enumerate(pairs):
        f, b = v.features[:max_regions], pixels[:max_regions]
        h, w = v.image_size
        loc = np.zeros((len(b), 5), np.float32)
        loc[:, :4] = b
        loc[:, 4] = (loc[:, 3] - loc[:, 1]) * (loc[:, 2] - loc[:, 0]) / (float(w) * float(h))
        loc[:, [0, 2]] /= float(w)
        loc[:, [1, 3]] /= float(h)
        feats[j, 0], feats[j, 1:len(f) + 1] = f.sum(axis=0) / len(f), f
        locs[j, 0], locs[j, 1:len(f) + 1] = [0, 0, 1, 1, 1], loc
        mask[j, :len(f) + 1] = 1
    return torch.from_numpy(feats), torch.from_numpy(locs), torch.from_numpy(mask)


def test_same_streams_and_logits_as_the_original(reference, tmp_path, capsys):
    name, module = reference
    multi = name == "vilbert-multi-task"
    config = {**ViLBertConfig(**CONFIG).to_dict(), "v_initializer_range": 0.02, "fusion_method": "mul",
              "v_hidden_act": "gelu", "hidden_act": "gelu", "attention_probs_dropout_prob": 0.1,
              "hidden_dropout_prob": 0.1, "v_attention_probs_dropout_prob": 0.1, "v_hidden_dropout_prob": 0.1}
    if multi:  # the 12-in-1 model: its task heads and its task token
        config.update(task_specific_tokens=True, visual_target=0, dynamic_attention=False, model="bert",
                      visualization=False, objective=0)
    torch.manual_seed(0)
    if multi:
        ref = module.VILBertForVLTasks(module.BertConfig.from_dict(config), num_labels=3).eval()
    else:
        ref = module.BertForMultiModalPreTraining(module.BertConfig.from_dict(config)).eval()
    # the reference's own randomly initialised weights, saved as its checkpoints are, load strictly
    torch.save(ref.state_dict(), tmp_path / "reference.bin")
    spec = {"adapter": "vilbert", "device": "cpu", "checkpoint": str(tmp_path / "reference.bin"),
            "config": {**CONFIG, "task_specific_tokens": multi}, "max_regions": 4, "ws_vector": "language+visual"}
    ours = build({**spec, "task_id": 9} if multi else spec)

    captions = ["A man rides a horse across a wide field.", "Lakisha is a [MASK] at the [MASK].", "woman"]
    pairs = [random_visual(3, 10, size=(40, 60)), random_visual(6, 11, size=(70, 50)), random_visual(2, 12, size=(30, 30))]
    text = encode_text(ours.tokenizer, captions, 512)
    feats, locs, image_mask = reference_inputs(pairs, 4)
    task_ids = torch.full((3, 1), 9) if multi else None
    with torch.inference_mode():
        if multi:
            out = ref.bert(text.input_ids, feats, locs, torch.zeros_like(text.input_ids), text.attention_mask,
                           image_mask, task_ids=task_ids)
        else:
            out = ref.bert(text.input_ids, feats, locs, torch.zeros_like(text.input_ids), text.attention_mask,
                           image_mask)
        ref_t, ref_v = out[0], out[1]
        ref_mlm, ref_img, ref_rel = ref.cls(ref_t, ref_v, out[2], out[3])
        t, v = ours.model.bert(text.input_ids, feats, locs, text.attention_mask, image_mask, task_ids)
        mlm, img, rel = ours.model(text.input_ids, feats, locs, text.attention_mask, image_mask, task_ids)
    # through the adapter: its own visual input (global token, 5-d positions, cap) from the regions
    regions = [v_ for v_, _ in pairs]
    s = ours.embed(captions, regions, "S")
    c = ours.embed(captions, regions, "C", words=["man", "Lakisha", "woman"])
    logp = ours.mask_logprobs(captions[1:2], regions[1:2])[0]
    lang = torch.cat([ref_t[:, :1], ref_t[:, 2:]], dim=1) if multi else ref_t  # the task token left out
    rows = np.arange(3)
    diffs = {
        "language stream": (t - ref_t).abs().max().item(),
        "vision stream": (v - ref_v).abs().max().item(),
        "MLM logits": (mlm - ref_mlm).abs().max().item(),
        "region class logits": (img - ref_img).abs().max().item(),
        "alignment logits": (rel - ref_rel).abs().max().item(),
        "embed S (language+visual)": np.abs(s - torch.cat([lang[:, 0], ref_v[:, 0]], 1).numpy()).max(),
        "embed C": np.abs(c - lang[rows, [2, 1, 1]].numpy()).max(),
        "mask_logprobs": np.abs(logp - torch.log_softmax(ref_mlm[1, (text.input_ids[1] == 103).nonzero()[:, 0]
                                                                  + int(multi)], -1).numpy()).max(),
    }
    with capsys.disabled():
        print(f"\n{name}: max abs differences " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    for what, diff in diffs.items():
        assert diff < 1e-4, what
    assert ref_t.abs().max() > 0.1 and ref_v.abs().max() > 0.1
