"""The configuration check (vlbias.config): every mistake is named by its key, with the closest valid
key suggested, before any job runs; every adapter declares the keys it reads."""

import copy
import re
from pathlib import Path

import pytest
import yaml
from helpers import REPO

from vlbias.config import ConfigError, check_config, load_config
from vlbias.errors import InputError
from vlbias.schemas import adapter_schema, adapters
from vlbias.suites.ieat.plan import ieat_models, table_models

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"
CONFIG = yaml.safe_load((REPO / "config/config.yaml").read_text())
CLIP = {"source": "images", "adapter": "open_clip", "arch": "ViT-B-32", "pretrained": "openai"}


def problems(change):
    config = copy.deepcopy(CONFIG)
    change(config)
    with pytest.raises(ConfigError) as e:
        check_config(config, SCHEMA, root=REPO)
    return e.value.problems


def test_the_shipped_config_is_valid_and_gets_the_schema_defaults():
    config = copy.deepcopy(CONFIG)
    del config["grounded"]["images"]["download"]["workers"]
    check_config(config, SCHEMA, root=REPO)
    assert config["grounded"]["images"]["download"]["workers"] == 8


@pytest.mark.parametrize("ci,expected", [
    ({}, {"level": 0.95, "n_boot": 10_000, "seed": 0, "method": "bca"}),  # each key's default
    ({"level": 0.9, "method": "percentile"}, {"level": 0.9, "n_boot": 10_000, "seed": 0, "method": "percentile"}),
    (None, None),  # no interval
])
def test_the_interval_settings_get_their_defaults(ci, expected):
    config = copy.deepcopy(CONFIG)
    config["stats"]["ci"] = ci
    check_config(config, SCHEMA, root=REPO)
    assert config["stats"]["ci"] == expected
    del config["stats"]["ci"]
    check_config(config, SCHEMA, root=REPO)
    assert config["stats"]["ci"] is None  # left out: off


@pytest.mark.parametrize("change,expected", [
    # a misspelt adapter key used to be ignored silently (mean pooling used)...
    (lambda c: c["seat"]["models"]["minilm"].update(poolng="cls"),
     "key 'seat/models/minilm/poolng': unknown key (did you mean 'pooling'?)"),
    # ... or to fail mid-run without naming the entry
    (lambda c: c["ieat"]["models"].update(clip={**CLIP, "pretraind": "openai"}),
     "key 'ieat/models/clip/pretraind': unknown key (did you mean 'pretrained'?)"),
    (lambda c: c["ieat"]["models"].update(clip={**CLIP, "adapter": "openclip"}),
     "key 'ieat/models/clip/adapter': unknown adapter 'openclip' (did you mean 'open_clip'?)"),
    (lambda c: c["grounded"]["models"]["lxmert"].update(batch_size="32"),
     "key 'grounded/models/lxmert/batch_size': expected integer, got '32'"),
    (lambda c: c["seat"]["models"]["minilm"].update(pooling="max"),
     "key 'seat/models/minilm/pooling': 'max' is not one of ['mean', 'cls']"),
    (lambda c: c["regions"]["detectors"]["bua-36"].update(min_box=3),
     "key 'regions/detectors/bua-36/min_box': unknown key (did you mean 'min_boxes'?)"),
    (lambda c: c["regions"]["detectors"]["frcnn-coco"].pop("conf"),
     "key 'regions/detectors/frcnn-coco': 'conf' is a required property"),
    (lambda c: c["mlm"]["models"]["lxmert"].update(device="gpu"),
     "key 'mlm/models/lxmert/device': 'gpu' does not match"),
    (lambda c: c["ieat"]["models"]["igpt"].update(fil="x"),
     "key 'ieat/models/igpt/fil': unknown key (did you mean 'file'?)"),
    (lambda c: c["stats"].update(n_sample=10),
     "key 'stats/n_sample': unknown key (did you mean 'n_samples'?)"),
    (lambda c: c["stats"]["ci"].update(level=95), "key 'stats/ci/level': 95 is greater than or equal to"),
    (lambda c: c["stats"]["ci"].update(method="bootstrap"), "key 'stats/ci/method': 'bootstrap' is not one of"),
    (lambda c: c["stats"]["ci"].update(nboot=10), "key 'stats/ci/nboot': unknown key (did you mean 'n_boot'?)"),
    # NaN passed every bound (alpha .nan reached the statistics: a traceback); a saturation beyond a cosine's
    # range made the flag constant
    (lambda c: c["stats"].setdefault("mleat", {}).update(alpha=float("nan")),
     "key 'stats/mleat/alpha': expected a finite number, got nan"),
    (lambda c: c["stats"]["ci"].update(level=float("inf")), "key 'stats/ci/level': expected a finite number, got inf"),
    (lambda c: c["regions"]["detectors"]["bua-36"].update(conf=float("nan")),
     "key 'regions/detectors/bua-36/conf': expected a finite number, got nan"),
    (lambda c: c["stats"].setdefault("mleat", {}).update(saturation=5), "key 'stats/mleat/saturation': 5 is greater"),
    (lambda c: c["stats"].setdefault("mleat", {}).update(saturation=-1), "key 'stats/mleat/saturation': -1 is less"),
])
def test_a_mistake_is_named_by_its_key(change, expected):
    found = problems(change)
    assert any(p.startswith(expected) for p in found), found


def test_a_misspelt_required_key_is_said_once_with_its_suggestion():
    found = problems(lambda c: c["stats"].update(n_sample=c["stats"].pop("n_samples")))
    assert found == ["key 'stats/n_sample': unknown key (did you mean 'n_samples'?)"]  # not also "required"


def test_an_unknown_top_level_key_is_one_short_line():
    found = problems(lambda c: c.update(ieatt={"models": {}}))
    assert found == ["key 'ieatt': unknown key (did you mean 'ieat'?)"]
    config = {**copy.deepcopy(CONFIG), "ieatt": {}}
    with pytest.raises(ConfigError) as e:
        check_config(config, SCHEMA, root=REPO)
    assert len(str(e.value)) < 200  # not the schema


def test_a_config_file_is_read_by_the_capped_reader(tmp_path):
    """An alias bomb of 1 kB in config/config.yaml took 172 s and 974 MiB before its
    error (yaml.safe_load expanded it for the check); a key given twice was taken silently (the last)."""
    import time

    nested = ["&a [" + ", ".join(["lol"] * 9) + "]"]
    nested += [f"&{n} [" + ", ".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi")]
    path = tmp_path / "config.yaml"
    path.write_text((REPO / "config/config.yaml").read_text() + "bomb: [" + ", ".join(nested) + "]\n")
    start = time.monotonic()
    with pytest.raises(InputError, match=r"(?s)config.yaml: not valid YAML: .*expand it to more than 1,000,000 items"):
        load_config(path)
    assert time.monotonic() - start < 1
    assert load_config(REPO / "config/config.yaml")["mlm"]  # its merge keys (`<<: *name`) are no key given twice
    path.write_text("cache: a\ncache: b\n")
    with pytest.raises(InputError, match=r"key 'cache' is given twice \(first on line 1\)"):
        load_config(path)


@pytest.mark.parametrize("change,expected", [
    (lambda c: c["ieat"]["specificity"].update(models=["igtp"]),
     "key 'ieat/specificity/models/0': 'igtp' is not a model under 'ieat/models' (did you mean 'igpt'?)"),
    (lambda c: c["ieat"]["specificity"].update(test="insect-flowers"),
     "key 'ieat/specificity/test': 'insect-flowers' is not a stimulus file in resources/stimuli/ieat "
     "(did you mean 'insect-flower'?)"),
    (lambda c: c["ieat"]["tables"]["table1"]["models"].append("simclr2"),
     "key 'ieat/tables/table1/models/2': 'simclr2' is not a model under 'ieat/models' (did you mean 'simclr'?)"),
    (lambda c: c["ieat"]["tables"]["table2"]["tests"].append("no-such-test"),
     "key 'ieat/tables/table2/tests/20': 'no-such-test' is not a stimulus file"),
    (lambda c: c["seat"].update(tests=["weat1", "weat99"]),
     "key 'seat/tests/1': 'weat99' is not a stimulus file"),
    (lambda c: c["seat"]["models"]["minilm"].update(tests=["weat1", "weat3c"]),
     "key 'seat/models/minilm/tests/1': 'weat3c' is not a stimulus file in resources/stimuli/seat "
     "(did you mean 'weat3'?)"),
    (lambda c: c["grounded"]["models"]["lxmert"].update(detector="bua36"),
     "key 'grounded/models/lxmert/detector': 'bua36' is not a detector under 'regions/detectors' "
     "(did you mean 'bua-36'?)"),
    (lambda c: c["grounded"]["experiments"].update(models=["visualbert", "lxmert", "vilbrt"]),
     "key 'grounded/experiments/models/2': 'vilbrt' is not a model under 'grounded/models' (did you mean 'vilbert'?)"),
    (lambda c: c["regions"].update(build=[{"dataset": "google", "detector": "bua"}]),
     "key 'regions/build/0/detector': 'bua' is not a detector under 'regions/detectors'"),
    (lambda c: c["grounded"]["protocols"].update(mine={"preset": "authors", "token_mask": "pieces"}),
     "key 'grounded/protocols/mine': protocol switch 'token_mask': is 'pieces'; must be one of 'piece', 'word'"),
    (lambda c: c["grounded"]["protocols"].update(mine={"preset": "authors", "tokenmask": "piece"}),
     "key 'grounded/protocols/mine': protocol switch 'tokenmask': unknown"),
    (lambda c: c["grounded"].update(protocol="author"),
     "key 'grounded/protocol': 'author' is not a protocol under 'grounded/protocols' (did you mean 'authors'?)"),
    (lambda c: c["grounded"]["models"]["visualbert-authors"].pop("visualbert"),
     "key 'grounded/experiments/models/1': 'visualbert-authors' and 'visualbert' both fill column 'VisualBERT' "
     "under protocol 'paper'"),
    (lambda c: c["mlm"].update(reference="bert-base"),
     "key 'mlm/reference': 'bert-base' is not a model under 'mlm/models' (did you mean 'bert'?)"),
    (lambda c: c["mlm"].update(build=["bert"]),
     "key 'mlm/build/0': 'bert' is not a vision-language model under 'mlm/models'"),
    (lambda c: c["mlm"]["models"].update(blip={"adapter": "blip", "weights": "random", "detector": "bua-36"}),
     "key 'mlm/models/blip': adapter 'blip' has no masked-language head"),
])
def test_a_name_that_exists_nowhere_is_named_by_its_key(change, expected):
    found = problems(change)
    assert any(p.startswith(expected) for p in found), found


IGPT = {"source": "images", "adapter": "igpt", "model_id": "openai/imagegpt-large", "revision": "main"}


@pytest.mark.parametrize("change,expected", [
    (lambda c: c["ieat"]["tables"]["table3"]["models"].append("igpt-l"),
     "key 'ieat/tables/table3/models/1': 'igpt-l' has several outputs; name one of igpt-l/layer20, igpt-l/logits"),
    (lambda c: c["ieat"]["tables"]["table3"]["models"].append("igpt-l/layer21"),
     "key 'ieat/tables/table3/models/1': 'igpt-l/layer21' is not a model under 'ieat/models' "
     "(did you mean 'igpt-l/layer20'?)"),
    (lambda c: c["ieat"]["models"]["igpt-l"].update(paper="igpt"),
     "key 'ieat/models/igpt-l/paper': 'igpt-l' has several outputs (layer20, logits); give `paper` as a mapping"),
    (lambda c: c["ieat"]["models"].update(text={"source": "images", "adapter": "sentence", "path": "x"}),
     "key 'ieat/models/text/adapter': adapter 'sentence' embeds no images"),
    (lambda c: c["seat"]["models"].update(pixels={"adapter": "simclr", "weights": "random"}),
     "key 'seat/models/pixels/adapter': adapter 'simclr' embeds no texts"),
    (lambda c: c["seat"]["models"].update(mine={"source": "vectors", "vectors": "v.npy", "format": "parquet"}),
     "key 'seat/models/mine/format': 'parquet' is not one of ['csv', 'npy', 'hdf5']"),
    (lambda c: c["seat"]["models"].update(mine={"source": "vectors"}),
     "key 'seat/models/mine': 'vectors' is a required property"),
    (lambda c: c["ieat"]["sweep"].update(models=[{"arch": "ViT-B-32", "pretrained": "openai"}],
                                         tests=["insect-flower", "insect-flowers"]),
     "key 'ieat/sweep/tests/1': 'insect-flowers' is not a stimulus file"),
    (lambda c: c["ieat"]["sweep"].update(models=[{"arch": "RN50", "pretrained": "openai", "name": "simclr"}]),
     "key 'ieat/sweep/models/0': its name 'simclr' is taken by 'ieat/models/simclr' (set `name`)"),
    (lambda c: c["ieat"]["sweep"].update(models=[{"pretrained": "openai"}]),
     "key 'ieat/sweep/models/0': 'arch' is a required property"),
    (lambda c: c["ieat"]["sweep"].update(models=[{"adapter": "sentence", "path": "x"}]),
     "key 'ieat/sweep/models/0/adapter': adapter 'sentence' embeds no images"),
    (lambda c: c["ieat"]["sweep"].update(models=[{"adapter": "hf_dual", "model_id": "x/y", "revison": "main"}]),
     "key 'ieat/sweep/models/0/revison': unknown key (did you mean 'revision'?)"),
])
def test_ieat_models_outputs_sweep_and_modalities(change, expected):
    found = problems(change)
    assert any(p.startswith(expected) for p in found), found


def test_sweep_entries_become_named_models():
    config = copy.deepcopy(CONFIG)
    config["ieat"]["sweep"]["models"] = [{"arch": "ViT-B-32", "pretrained": "laion2b_s34b_b79k"},
                                         {"arch": "ViT-B-32", "checkpoint": "/w/My Weights.safetensors"},
                                         {"arch": "RN50", "weights": "random", "name": "rn"},
                                         {"adapter": "hf_dual", "model_id": "openai/clip-vit-base-patch32",
                                          "revision": "main"},
                                         {"adapter": "hf_dual", "path": "/m/Tiny SigLIP"},
                                         {"adapter": "hf_dual", "architecture": "siglip", "weights": "random",
                                          "seed": 2, "processor": "p"},
                                         {"arch": "RN50", "weights": "random"}]
    check_config(config, SCHEMA, root=REPO)
    models = ieat_models(config["ieat"])
    assert list(models)[-7:] == ["vit-b-32-laion2b_s34b_b79k", "vit-b-32-my-weights", "rn", "clip-vit-base-patch32",
                                 "tiny-siglip", "siglip-random2", "rn50-random0"]  # the seed: the schema's default
    # the adapter's defaults filled in by the check (vlbias/schemas/models/open_clip.yaml and its includes)
    assert models["rn"] == {"source": "images", "adapter": "open_clip", "arch": "RN50", "weights": "random",
                            "name": "rn", "seed": 0, "batch_size": 32, "device": "auto",
                            "precision": "fp32"}
    names = table_models(models)
    assert names["igpt-l/logits"] == ("igpt-l", "logits") and names["rn"] == ("rn", None) and "igpt-l" not in names
    # the schema's defaults are copied, never shared between configs
    assert CONFIG["ieat"]["sweep"]["models"] == [] and check_config(copy.deepcopy(CONFIG), SCHEMA, root=REPO)


def test_an_entry_of_the_wrong_shape_is_named_before_its_references_are_followed():
    # found by tests/io/test_hostile_inputs.py: an iGPT `layer: {}` was a TypeError in the reference pass
    found = problems(lambda c: c["ieat"]["models"]["igpt-l"].update(layer={}))
    assert found and all(p.startswith("key 'ieat/models/igpt-l/layer'") for p in found), found


def test_every_problem_is_listed_not_only_the_first():
    found = problems(lambda c: (c["seat"]["models"]["minilm"].update(poolng="cls"),
                                c["regions"]["detectors"]["bua-36"].update(min_box=3)))
    assert len(found) == 2


# --- every adapter declares the keys it reads ------------------------------------------------------

SRC = REPO / "src"
WORKFLOW_KEYS = {"adapter", "threads", "cache"}  # set by the workflow, not by the config entry


def keys_read(module):
    """Keys an adapter module reads from its entry: spec.get("x") and spec["x"], with those of the
    vlbias.models.vl base class and vlbias.models.hf loader when it builds on them and of
    vlbias.runtime."""
    files = [SRC / (module.replace(".", "/") + ".py"), SRC / "vlbias/runtime.py"]
    if "VLEncoder" in files[0].read_text():
        files.append(SRC / "vlbias/models/vl.py")
    if "VLEncoder" in files[0].read_text() or "load_model" in files[0].read_text():
        files.append(SRC / "vlbias/models/hf.py")
    text = "".join(f.read_text() for f in files)
    return set(re.findall(r"""spec(?:\.get\(|\[)\s*["'](\w+)["']""", text))


@pytest.mark.parametrize("kind,package", [("models", "vlbias.models"), ("detectors", "vlbias.regions")])
def test_every_adapter_module_has_a_schema_with_the_keys_it_reads(kind, package):
    """The registry finds adapter <name> in module <package>.<name> (vlbias.registry): each schema
    file names a module that registers it under that name, and declares the keys it reads."""
    for name in adapters(kind):
        module = f"{package}.{name}"
        assert f'@register("{name}")' in (SRC / (module.replace(".", "/") + ".py")).read_text(), module
        declared = set(adapter_schema(kind, name)["properties"])
        undeclared = keys_read(module) - declared - WORKFLOW_KEYS
        assert not undeclared, f"{kind}/{name}.yaml lacks {sorted(undeclared)}"


def test_schema_files_are_well_formed():
    for path in sorted(Path(SRC, "vlbias/schemas").glob("*/*.yaml")):
        doc = yaml.safe_load(path.read_text()) or {}
        assert set(doc) <= {"description", "include", "properties", "required", "family"}, path
        if not path.stem.startswith("_"):
            assert doc.get("description"), f"{path}: one line saying what the adapter is"


def test_a_renamed_adapter_key_is_named_with_what_to_write():
    config = copy.deepcopy(CONFIG)
    config["ieat"]["sweep"]["models"] = [{"arch": "RN50", "random_init": True, "name": "rn"}]
    with pytest.raises(ConfigError) as e:
        check_config(config, SCHEMA, root=REPO)
    assert e.value.problems == ["key 'ieat/sweep/models/0/random_init': no longer read; write `weights: random` instead"]
