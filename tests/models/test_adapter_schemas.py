"""The config schemas of the image-encoder adapters accept the entries their tests build and refuse misspelt keys."""

import jsonschema
import pytest
from helpers.tiny import TINY_IGPT as IGPT
from helpers.tiny import TINY_OPEN_CLIP_TEXT as OPEN_CLIP
from helpers.tiny import SIMCLR_R50_SK1 as SIMCLR

from vlbias.config import adapter_schema


def schema(adapter):
    """The adapter's keys (vlbias.config.adapter_schema) and the workflow's, every other key refused."""
    own = adapter_schema("models", adapter)
    return {**own, "additionalProperties": False,
            "properties": {**own["properties"], "adapter": {"const": adapter}, "threads": {"type": "integer"}}}


@pytest.mark.parametrize("adapter,entry", [
    ("igpt", IGPT), ("igpt", {**IGPT, "layer": [10, 20], "norm": "rms", "batch_size": 4}),
    ("simclr", SIMCLR), ("simclr", {**SIMCLR, "weights": None, "checkpoint": "r152_3x_sk1.safetensors"}),
    ("open_clip", OPEN_CLIP), ("open_clip", {**OPEN_CLIP, "tokenizer": "ViT-B-32"}),
])
def test_entries_of_the_tests_validate(adapter, entry):
    jsonschema.validate({k: v for k, v in entry.items() if v is not None}, schema(adapter))


@pytest.mark.parametrize("adapter,entry,error", [
    ("igpt", {**IGPT, "layers": 20}, "Additional properties are not allowed"),
    ("igpt", {**IGPT, "layer": "20"}, "is not valid under any of the given schemas"),
    ("igpt", {**IGPT, "norm": "layer"}, "is not one of"),
    ("simclr", {**SIMCLR, "depth": 34}, "is not one of"),
    ("simclr", {**SIMCLR, "sk_ratio": 0.0625}, "Additional properties are not allowed"),
    ("open_clip", {"adapter": "open_clip", "weights": "random"}, "'arch' is a required property"),
])
def test_misspelt_or_mistyped_keys_are_refused(adapter, entry, error):
    with pytest.raises(jsonschema.ValidationError, match=error):
        jsonschema.validate(entry, schema(adapter))
