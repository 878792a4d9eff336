"""The zoo's metadata, selection and analyses (vlbias.suites.zoo): hand-checked cases, the committed tables
against open_clip and its docs, and synthetic zoos with a planted association (one dataset's models) and a
planted relation between d and accuracy."""

import copy

import numpy as np
import open_clip
import pandas as pd
import pytest
import torch
import yaml
from helpers import REPO
from helpers.tiny import HF_DUAL_CONFIGS, TINY_DUAL, tiny_dual_dir

from vlbias.associate import run_test
from vlbias.errors import InputError
from vlbias.io.stimuli import load_stimulus
from vlbias.io.store import write_embeddings
from vlbias.suites.zoo import failure, fetch_or_failure
from vlbias.report.zoo import eats_table
from vlbias.suites.zoo.analysis import (arch_family, failure_row, order_of, performance, predictors, ranking,
                                        ranking_correlations)
from vlbias.suites.zoo.metadata import COLUMNS as META
from vlbias.suites.zoo.metadata import (architecture, dataset_of, hf_dual_architecture, read_accuracy,
                                        read_architectures, read_datasets, samples_seen)
from vlbias.suites.zoo.select import model_rows, registry_pairs, zoo_models

DATASETS = REPO / "resources/zoo/datasets.tsv"
ARCHITECTURES = REPO / "resources/zoo/architectures.tsv"
TINY_CFG = {"embed_dim": 8, "vision_cfg": {"image_size": 16, "layers": 1, "width": 16, "patch_size": 8, "head_width": 8},
            "text_cfg": {"context_length": 8, "vocab_size": 64, "width": 16, "heads": 2, "layers": 1}}


def zoo_section(**select):
    return {"select": {"pairs": [], "archs": ["*"], "datasets": [], "params": {}, "limit": None, **select},
            "models": [], "datasets": str(DATASETS), "architectures": str(ARCHITECTURES)}


# --- metadata ---------------------------------------------------------------------------------------------


def test_samples_seen_is_read_from_the_tag():
    assert samples_seen("laion2b_s34b_b79k", "2320000000") == 34 * 10**9
    assert samples_seen("commonpool_m_clip_s128m_b4k", "") == 128 * 10**6
    assert samples_seen("laion400m_e32", "400000000") == 32 * 400 * 10**6  # epochs of the dataset
    assert samples_seen("openai", "400000000") is None and samples_seen("laion400m_e32", "") is None


def test_every_registry_pair_has_a_dataset_and_the_first_matching_row_names_it():
    datasets = read_datasets(DATASETS)
    assert all(dataset_of(datasets, tag, arch) for arch, tag in open_clip.list_pretrained())
    assert dataset_of(datasets, "datacomp_s34b_b86k", "ViT-B-32")["dataset"] == "DataComp-1B"
    assert dataset_of(datasets, "datacomp_s_s13m_b4k", "ViT-B-32")["dataset"] == "DataComp-S (filtered)"
    assert dataset_of(datasets, "meta", "PE-Core-B-16")["curation"] == "proprietary"
    assert dataset_of(datasets, "meta", "ViT-B-32") is None  # "meta" names PE's data only on PE models


def test_a_dataset_row_without_a_known_curation_or_a_source_is_refused(tmp_path):
    path = tmp_path / "d.tsv"
    path.write_text("tag\tarch\tdataset\tpairs\tcuration\tsource\nx\t*\tX\t10\tscraped\tpaper\n")
    with pytest.raises(InputError, match="curation 'scraped' is not one of"):
        read_datasets(path)
    path.write_text("tag\tarch\tdataset\tpairs\tcuration\tsource\nx\t*\tX\t10\tweb-scraped\t \n")
    with pytest.raises(InputError, match="no source"):
        read_datasets(path)


def test_the_meta_count_is_the_built_model_s():
    sizes = architecture("zoo-test-tiny", TINY_CFG)
    with torch.random.fork_rng(devices=[]):
        model = open_clip.create_model("zoo-test-tiny")
    assert sizes["params"] == sum(p.numel() for p in model.parameters())
    assert sizes["image_params"] == sum(p.numel() for p in model.visual.parameters())
    assert (sizes["embed_dim"], sizes["image_size"]) == (8, 16)


# each hf_dual architecture's tiny config, and by hand the modules of its image tower and of neither tower
HF_DUAL = {"clip": (HF_DUAL_CONFIGS["clip"], ["vision_model", "visual_projection"], [], 8, 32),
           "siglip": (HF_DUAL_CONFIGS["siglip"], ["vision_model"], [], 16, 32),
           "siglip2": (TINY_DUAL["siglip2"], ["vision_model"], [], 16, None),
           "blip": (TINY_DUAL["blip"], ["vision_model", "vision_proj"], ["itm_head", "crossattention"], 8, 32),
           "flava": (TINY_DUAL["flava"], ["image_model", "image_projection"],
                     ["multimodal_model", "image_to_mm_projection", "text_to_mm_projection"], 8, 32)}


@pytest.mark.parametrize("arch", HF_DUAL)
def test_an_hf_dual_entry_is_counted_from_its_config_on_the_meta_device(arch):
    from vlbias.models.dual import ARCHITECTURES

    config, image_modules, neither_modules, width, size = HF_DUAL[arch]
    model_class, config_class = ARCHITECTURES[arch]
    model = model_class(config_class(**config))
    count = lambda modules: sum(p.numel() for name, m in model.named_modules() if name.split(".")[-1] in modules
                                for p in m.parameters(recurse=True)) + \
        sum(p.numel() for name, p in model.named_parameters(recurse=False) if name in modules)
    total, image, neither = sum(p.numel() for p in model.parameters()), count(image_modules), count(neither_modules)
    sizes = hf_dual_architecture({"adapter": "hf_dual", "architecture": arch, "weights": "random", "seed": 0,
                                  "config": config})
    assert sizes == {"params": total, "image_params": image, "text_params": total - image - neither,
                     "embed_dim": width, "image_size": size}
    assert (neither > 0) == bool(neither_modules) and sizes["text_params"] > 0


def test_an_hf_dual_model_directory_is_counted_from_its_config_json_and_a_hub_id_not_at_all(tmp_path):
    tiny_dual_dir(tmp_path / "clip", "clip")
    random = {"adapter": "hf_dual", "architecture": "clip", "weights": "random", "seed": 0,
              "config": HF_DUAL_CONFIGS["clip"]}
    assert hf_dual_architecture({"adapter": "hf_dual", "path": str(tmp_path / "clip")}) == hf_dual_architecture(random)
    assert hf_dual_architecture({"adapter": "hf_dual", "model_id": "openai/clip-vit-base-patch32"}) == {}
    zoo = {**zoo_section(), "models": [{**random, "name": "tiny-clip", "tag": "openai"},
                                       {"adapter": "hf_dual", "model_id": "openai/clip-vit-base-patch32",
                                        "tag": "openai", "name": "hub-clip"}]}
    rows = model_rows(zoo_models(zoo), zoo)
    assert rows[0]["params"] == hf_dual_architecture(random)["params"] and rows[1]["params"] is None
    with pytest.raises(InputError, match="key 'zoo/select/params': the size of hub-clip is not known offline"):
        zoo_models({**zoo, "select": {**zoo["select"], "params": {"max": 100}}})


def test_the_committed_architecture_table_is_the_installed_open_clip_s():
    counted = read_architectures(ARCHITECTURES)
    assert set(counted) == {arch for arch, _ in registry_pairs()}
    for arch in ("RN50", "ViT-B-32", "coca_ViT-B-32"):  # counted anew on the meta device (CoCa: its decoder)
        assert counted[arch] == architecture(arch)


@pytest.mark.mirror
def test_parameters_agree_with_open_clip_s_model_profile(mirror):
    profile = pd.read_csv(mirror / "open_clip/docs/model_profile.csv").set_index("model")
    counted = read_architectures(ARCHITECTURES)
    listed = [a for a in counted if a in profile.index]
    assert len(listed) > 40
    for arch in listed:
        for ours, theirs in (("params", "mparams"), ("image_params", "image_mparams"), ("text_params", "text_mparams")):
            assert counted[arch][ours] / 1e6 == pytest.approx(profile.loc[arch, theirs], rel=0.01), (arch, ours)
        assert counted[arch]["embed_dim"] == profile.loc[arch, "embed_dim"]


def test_a_model_the_accuracy_table_lacks_has_empty_cells(tmp_path):
    path = tmp_path / "acc.csv"
    path.write_text("name,pretrained,ImageNet 1k,Average perf. on 38 datasets\nRN50,openai,0.59,0.51\n")
    zoo = zoo_section(pairs=["RN50:openai", "RN50:yfcc15m"])
    rows = model_rows(zoo_models(zoo), zoo, read_accuracy(path))
    assert [(r["model"], r["imagenet"], r["average38"]) for r in rows] == [
        ("rn50-openai", 0.59, 0.51), ("rn50-yfcc15m", None, None)]
    assert rows[1]["dataset"] == "YFCC-15M" and rows[1]["params"] == read_architectures(ARCHITECTURES)["RN50"]["params"]
    path.write_text("name,pretrained,ImageNet 1k,Average perf. on 38 datasets\nRN50,openai,n/a,0.51\n")
    with pytest.raises(InputError, match="line 2, column 'ImageNet 1k': 'n/a' is not a number"):
        read_accuracy(path)


# --- the selection ----------------------------------------------------------------------------------------


def test_a_selection_filters_by_pattern_dataset_size_and_count():
    everything = zoo_models(zoo_section(pairs="all"))
    assert len(everything) == len(registry_pairs()) < len(open_clip.list_pretrained())
    assert not any(e["arch"].startswith(("nllb-clip", "xlm-roberta", "roberta")) for e in everything.values())
    vits = zoo_models(zoo_section(pairs="all", archs=["ViT-B-32"], datasets=["LAION-2B (en)"]))
    assert {e["pretrained"] for e in vits.values()} == {t for a, t in open_clip.list_pretrained()
                                                       if a == "ViT-B-32" and t.startswith("laion2b")}
    small = zoo_models(zoo_section(pairs="all", params={"max": 110}))
    counted = read_architectures(ARCHITECTURES)
    assert small and all(counted[e["arch"]]["params"] <= 110e6 for e in small.values())
    assert list(zoo_models(zoo_section(pairs="all", limit=3))) == list(everything)[:3]


@pytest.mark.parametrize("select, message", [
    ({"pairs": ["ViT-B-32:opnai"]}, "key 'zoo/select/pairs/0': 'ViT-B-32:opnai' is not an open_clip pretrained pair "
                                    "(arch:tag) (did you mean 'ViT-B-32:openai'?)"),
    ({"pairs": ["ViT-B-32:openai"], "archs": ["ViT-B-23"]}, "key 'zoo/select/archs/0': 'ViT-B-23' matches no selected "
                                                            "architecture (did you mean 'ViT-B-32'?)"),
    ({"pairs": ["ViT-B-32:openai"], "datasets": ["LAION-2B"]}, f"key 'zoo/select/datasets/0': 'LAION-2B' is not a "
                                                               f"dataset of {DATASETS} (did you mean 'LAION-5B'?)"),
])
def test_an_unknown_name_in_a_selection_is_one_line_with_a_suggestion(select, message):
    with pytest.raises(InputError) as e:
        zoo_models(zoo_section(**select))
    assert str(e.value) == message


def test_a_failed_fetch_is_a_failure_record_and_store(tmp_path):
    record = fetch_or_failure("zoo/gone", {"adapter": "open_clip", "arch": "RN50", "checkpoint": str(tmp_path / "no.pt"),
                                           "tag": "openai"}, cache=tmp_path / "cache", lock_path=None)
    assert record["failed"].startswith("weights not fetched") and "no.pt" in record["failed"]


# --- the analyses: synthetic zoos ---------------------------------------------------------------------------


def stimulus(tmp_path, name="toy", texts=False):
    sets = {s: {"label": s, "category": f"toy/{s.lower()}"} for s in "XYAB"}
    if texts:
        sets |= {s: {"label": s, "items": [f"{s}{i}" for i in range(3)]} for s in "AB"}
    path = tmp_path / f"{name}.yaml"
    level = "cross-modal" if texts else "image"
    path.write_text(yaml.safe_dump({"id": name, "name": name, "suite": "ieat", "level": level, **sets}))
    return load_stimulus(path)


def planted_store(path, rng, strength, n=8, dim=16):
    """A store whose X lie toward A and Y toward B by ``strength`` (0: no association)."""
    a, b = rng.normal(size=dim), rng.normal(size=dim)
    sets = {"A": a + rng.normal(size=(n, dim)), "B": b + rng.normal(size=(n, dim)),
            "X": strength * a + rng.normal(size=(n, dim)), "Y": strength * b + rng.normal(size=(n, dim))}
    write_embeddings(path, {f"toy/{s.lower()}": (v, [f"{s}{i}" for i in range(n)]) for s, v in sets.items()},
                     {"model_id": path.stem})


def synthetic_zoo(tmp_path, strength, accuracy=None, per_dataset=5, seed=0):
    """Models of four datasets, ``per_dataset`` each (sizes and samples seen varying within each): a row per
    model of run_test on its store, with the store's association ``strength(dataset, i)``."""
    rng = np.random.default_rng(seed)
    test = stimulus(tmp_path)
    rows, meta = [], []
    for dataset in ("Alpha", "Beta", "Gamma", "Planted"):
        for i in range(per_dataset):
            model = f"{dataset.lower()}-{i}"
            planted_store(tmp_path / f"{model}.h5", rng, strength(dataset, i))
            rows.append(run_test(test, tmp_path / f"{model}.h5", model, n_samples=200, seed=0))
            meta.append({"model": model, "arch": f"ViT-{i}", "dataset": dataset, "params": int(rng.integers(1e7, 1e9)),
                         "samples_seen": int(rng.integers(1e7, 1e10)),
                         "average38": accuracy(dataset, i) if accuracy else None})
    return eats_table(rows, [test], pd.DataFrame(meta).reindex(columns=["model", *META]))


def test_a_planted_dataset_association_comes_out_with_its_sign_and_alone_significant(tmp_path):
    eats = synthetic_zoo(tmp_path, lambda dataset, i: 1.5 if dataset == "Planted" else 0.0)
    table = predictors(eats)
    coef = table[(table["scope"] == "toy") & (table["kind"] == "coefficient")].set_index("term")
    planted = coef.loc["C(dataset)[T.Planted]"]
    assert planted["estimate"] > 0 and planted["p"] < 0.01 and planted["low"] > 0
    for other in ("C(dataset)[T.Beta]", "C(dataset)[T.Gamma]", "log_params", "log_samples"):
        assert coef.loc[other, "p"] > 0.05, other
    anova = table[(table["scope"] == "toy") & (table["kind"] == "anova")].set_index("term")
    assert anova.loc["C(dataset)", "p"] < 0.01 and anova.loc["log_params", "p"] > 0.05
    # one architecture family: left out of the fit, and the formula says so
    assert "arch_family" not in coef.iloc[0]["formula"]


def test_a_planted_relation_between_d_and_accuracy_is_recovered(tmp_path):
    # the association grows with the model's accuracy, whatever its dataset
    strength = lambda dataset, i: 0.25 * i + 0.1 * "ABGP".index(dataset[0])
    accuracy = lambda dataset, i: 0.3 + 0.1 * i + 0.04 * "ABGP".index(dataset[0])
    eats = synthetic_zoo(tmp_path, strength, accuracy)
    table = performance(eats, n_boot=200, seed=0).set_index(["accuracy", "method"])
    for method in ("pearson", "spearman"):
        row = table.loc[("average38", method)]
        assert row["r"] > 0.7 and row["p"] < 0.01 and 0 < row["low"] < row["r"] < row["high"] and row["n_models"] == 20
    assert table.loc[("imagenet", "pearson"), "n_models"] == 0 and np.isnan(table.loc[("imagenet", "pearson"), "r"])
    # Holm across the tests: two tests of the same p, each p doubled
    two = performance(pd.concat([eats, eats.assign(test="again")]), n_boot=10, seed=0)
    assert two["p_holm"].dropna().tolist() == pytest.approx((2 * two["p"].dropna()).clip(upper=1).tolist())
    unrelated = performance(synthetic_zoo(tmp_path, lambda d, i: 0.0, accuracy, seed=2), n_boot=200, seed=0)
    assert unrelated.set_index(["accuracy", "method"]).loc[("average38", "pearson"), "p"] > 0.05


def test_holm_adjusts_within_each_model_and_a_failed_model_keeps_its_rows(tmp_path):
    rng = np.random.default_rng(0)
    tests = [stimulus(tmp_path, f"t{i}") for i in range(3)]
    planted_store(tmp_path / "m.h5", rng, 1.0)
    write_embeddings(tmp_path / "gone.h5", {}, {"failed": "not loaded: boom"})
    assert failure(tmp_path / "gone.h5") == "not loaded: boom" and failure(tmp_path / "m.h5") is None
    rows = [run_test(t, tmp_path / "m.h5", "m", n_samples=100, seed=0) for t in tests]
    rows += [failure_row(t, "gone", "not loaded: boom") for t in tests]
    meta = pd.DataFrame([{"model": "m"}, {"model": "gone"}]).reindex(columns=["model", *META])
    eats = eats_table(rows, tests, meta)
    p = eats.loc[eats["model"] == "m", "p"].to_numpy()
    order = np.argsort(p)
    expected = np.maximum.accumulate(np.minimum(1, p[order] * np.array([3, 2, 1])))
    assert eats.loc[eats["model"] == "m", "p_holm"].to_numpy()[order] == pytest.approx(expected)
    assert eats.loc[eats["model"] == "gone", "status"].eq("failed: not loaded: boom").all()
    assert eats.loc[eats["model"] == "gone", "p_holm"].isna().all()


def test_the_order_of_a_test_names_its_targets_and_attributes(tmp_path):
    assert order_of(stimulus(tmp_path)) == "image-image"
    assert order_of(stimulus(tmp_path, "cross", texts=True)) == "image-text"


def test_architecture_families():
    assert [arch_family(a) for a in ("ViT-B-32", "RN50x4", "convnext_base_w", "EVA02-L-14", "coca_ViT-B-32")] == [
        "ViT", "RN", "convnext", "EVA", "coca"]


def test_ranking_and_its_correlations():
    eats = pd.DataFrame({"model": ["a", "b", "c"] * 2, "test": ["t1"] * 3 + ["t2"] * 3,
                         "d": [0.1, -0.9, 0.5, 0.2, 0.3, 0.1], "status": "ok"})
    ranks = ranking(eats)
    assert ranks["t1"].to_dict() == {"a": 3.0, "b": 1.0, "c": 2.0}
    assert ranks["t2"].to_dict() == {"a": 2.0, "b": 1.0, "c": 3.0}
    assert ranking_correlations(ranks).loc["t1", "t2"] == pytest.approx(0.5)


def test_listing_the_whole_registry_offline(mirror, tmp_path, monkeypatch):
    from vlbias.config import check_config, schema_path
    from vlbias.cli.list import listing

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    monkeypatch.chdir(REPO)  # the config's relative paths
    config = check_config({**copy.deepcopy(config), "mirror": str(mirror), "cache": str(tmp_path)}, schema_path())
    rows = pd.DataFrame(listing(config))
    assert len(rows) == len(registry_pairs()) and rows["dataset"].ne("").all() and rows["params"].gt(0).all()
    vit = rows.set_index("model").loc["vit-b-32-openai"]
    assert (vit.imagenet, vit.dataset, vit.embed_dim) == (pytest.approx(0.6332, abs=1e-4), "WIT-400M (OpenAI)", 512)
