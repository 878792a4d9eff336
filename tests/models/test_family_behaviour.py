"""One behaviour every model family shows (as transformers' ModelTesterMixin holds every model to one), for
each adapter in the registry on its tiny model (helpers.tiny.tiny_entries): float32 (n, dim) vectors from each
role its schema declares (vlbias.models.protocols.roles), an empty (0, dim) array for no input, vectors that do
not depend on their batch, the same vectors from two builds of one seed and others from another seed, and the
provenance keys the embedding cache is keyed by. The per-family modules test what each family computes."""

import numpy as np
import pytest

from vlbias.models import build, families, protocols
from vlbias.schemas import adapters

from helpers.tiny import VL_CAPTIONS, VL_WORDS, picture, random_visual, tiny_entries

ADAPTERS = adapters("models")
# the provenance every family records in .info: what its weights are and where they came from, and what
# computed its vectors (the embedding cache is keyed by .info)
INFO_KEYS = {"adapter", "model_id", "revision", "weights", "weights_file", "weights_sha256", "dim", "device",
             "precision", "dtype", "versions"}
N = 3
PIXELS = np.random.default_rng(0).integers(0, 256, (N, 64, 64, 3), dtype=np.uint8)  # SimCLR's tiny input is 64
TEXTS = ["a rose", "This is a tulip in the garden.", "wasp"]


@pytest.fixture(scope="module")
def entries(tmp_path_factory):
    return tiny_entries(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def encoders(entries):
    """{adapter: its tiny model}, each built on first use."""
    built = {}

    def get(adapter):
        if adapter not in built:
            built[adapter] = build(entries[adapter])
        return built[adapter]

    return get


def regions(encoder, n):
    """What a vision-language family reads with each caption: an image, region features, or nothing (the
    text-only BERT)."""
    if encoder.family == "bert_mlm":
        return None
    return [picture(i) if encoder.needs_pixels else random_visual(3, i)[0] for i in range(n)]


def outputs(encoder, adapter, n):
    """{call: float32 (n, its width)} of the first n inputs, from every role the family's schema declares."""
    declared = protocols.roles(families.family(adapter))
    found = {}
    if protocols.ImageEncoder in declared:
        found["encode_images"] = encoder.encode_images(PIXELS[:n])
    if protocols.TextEncoder in declared:
        found["encode_texts"] = encoder.encode_texts(TEXTS[:n])
    if protocols.MultiOutputImageEncoder in declared:
        found |= {f"encode_outputs {name}": v for name, v in encoder.encode_outputs(PIXELS[:n]).items()}
    if protocols.VisionLanguageEncoder in declared:
        for level in ("W", "S", "C"):
            words = VL_WORDS[:n] if level == "C" else None
            found[f"embed {level}"] = encoder.embed(VL_CAPTIONS[:n], regions(encoder, n), level, words=words)
    if protocols.MaskedLM in declared:
        masked = [f"The {encoder.tokenizer.mask_token} is a nurse.", f"A {encoder.tokenizer.mask_token} rides.",
                  f"{encoder.tokenizer.mask_token} sings"][:n]
        found["mask_logprobs"] = encoder.mask_logprobs(masked, regions(encoder, n))
    return found


def width(encoder, call):
    """The vectors' width a call's protocol promises."""
    if call.startswith("encode_outputs"):
        return encoder.dims[call.split()[1]]
    return encoder.output_dim(call.split()[1]) if call.startswith("embed") else encoder.dim


def test_every_family_has_a_tiny_model(entries):
    missing = sorted(set(ADAPTERS) - set(entries))
    assert not missing, f"no tiny entry in helpers.tiny.tiny_entries for {', '.join(missing)}"
    assert sorted(entries) == sorted(ADAPTERS)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_float32_vectors_of_each_role(adapter, encoders):
    encoder = encoders(adapter)
    found = outputs(encoder, adapter, N)
    assert found, adapter
    for call, vectors in found.items():
        if call == "mask_logprobs":  # per caption (m, V): one [MASK] each
            assert [(v.dtype, v.shape[0]) for v in vectors] == [(np.float32, 1)] * N, call
            assert len({v.shape for v in vectors}) == 1 and np.isfinite(np.concatenate(vectors)).all(), call
            continue
        assert vectors.dtype == np.float32 and vectors.shape == (N, width(encoder, call)), (call, vectors.dtype,
                                                                                          vectors.shape)
        assert np.isfinite(vectors).all() and np.ptp(vectors, axis=0).max() > 0, call  # inputs give their own vectors


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_no_input_gives_an_empty_array(adapter, encoders):
    encoder = encoders(adapter)
    for call, vectors in outputs(encoder, adapter, 0).items():
        if call == "mask_logprobs":
            assert vectors == [], call
        else:
            assert vectors.dtype == np.float32 and vectors.shape == (0, width(encoder, call)), (call, vectors.shape)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_vectors_do_not_depend_on_their_batch(adapter, encoders):
    encoder = encoders(adapter)
    size = encoder.batch_size
    try:
        encoder.batch_size = N
        together = outputs(encoder, adapter, N)
        encoder.batch_size = 1
        alone = outputs(encoder, adapter, N)
    finally:
        encoder.batch_size = size
    for call in together:
        a, b = np.concatenate(together[call]), np.concatenate(alone[call])
        # float32 noise, on the vectors' own scale (a random SimCLR's are about 1e-3)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max(), err_msg=call)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_one_seed_gives_one_model(adapter, entries, encoders):
    first = outputs(encoders(adapter), adapter, N)
    again = outputs(build(entries[adapter]), adapter, N)
    for call in first:
        np.testing.assert_array_equal(np.concatenate(first[call]), np.concatenate(again[call]), err_msg=call)
    if entries[adapter].get("weights") == "random":
        other = outputs(build({**entries[adapter], "seed": 1}), adapter, N)
        for call in first:
            assert not np.allclose(np.concatenate(first[call]), np.concatenate(other[call])), call


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_the_provenance_every_family_records(adapter, encoders):
    info = encoders(adapter).info
    assert INFO_KEYS <= set(info), f"{adapter} records no {sorted(INFO_KEYS - set(info))}"
    assert info["adapter"] == adapter and info["dim"] == encoders(adapter).dim and info["dtype"] == "float32"
