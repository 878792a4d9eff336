"""What the workflow plans, tested in Python: the targets of the shipped config and of a small one,
and each job's input functions per wildcard (vlbias.suites.<suite>.plan; the .smk files only call them)."""

import copy
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from helpers import REPO

from vlbias.config import check_config
from vlbias.errors import InputError
from vlbias.suites.grounded.plan import GroundedPlan, embedding_path, experiment_path, mleat_job_path, table_path

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"
EXTS = ["csv", "md", "tex", "html", "rows.csv", "missing.tsv"]


def mleat_files(suite, tables):
    """A table's ML-EAT files in the default target: its CSV, page, summary figure and folder of EAT-Maps."""
    return [f"results/{suite}/mleat/{t}{ext}" for t in tables for ext in (".csv", ".html", ".png", "")]


@pytest.fixture(scope="module")
def shipped():
    """The shipped config, checked (defaults filled in) as the Snakefile checks it."""
    with open(REPO / "config/config.yaml") as f:
        config = yaml.safe_load(f)
    return check_config(config, SCHEMA, root=REPO)


@pytest.fixture
def small(tmp_path, monkeypatch):
    """The tiny grounded project of the workflow test (two tests, five models, two protocols), checked."""
    from helpers.grounded import tiny_project

    tiny_project(tmp_path)
    monkeypatch.chdir(tmp_path)  # the plan reads stimulus files relative to the project, as Snakemake does
    with open("config/config.yaml") as f:
        return check_config(yaml.safe_load(f), SCHEMA, root=tmp_path)


# --- grounded ---------------------------------------------------------------------------------------


def test_the_shipped_config_builds_no_grounded_tables_until_asked(shipped, monkeypatch):
    assert GroundedPlan(shipped).targets() == []
    config = copy.deepcopy(shipped)
    config["grounded"]["experiments"]["build"] = True
    monkeypatch.chdir(REPO)
    plan = GroundedPlan(config)
    main = config["grounded"]["protocol"]
    others = [p for p in config["grounded"]["protocols"] if p != main]
    tables = list(config["grounded"]["tables"])
    assert plan.targets() == ([table_path(t, e) for t in tables for e in EXTS]
                              + [table_path(f"{p}/{t}", e) for p in others for t in tables for e in EXTS]
                              + [table_path(f"extended/{t}", e) for t in tables for e in EXTS]
                              + mleat_files("grounded", [*tables, *(f"extended/{t}" for t in tables)])
                              + ["results/grounded/comparison.csv", "results/grounded/comparison.md"])
    # every table's jobs resolve (each test it names has a stimulus file), on the schema's defaults
    spec = plan.table_spec("table3")
    assert [c["label"] for c in spec["columns"]] == ["VisualBERT", "ViLBERT", "LXMERT", "VL-BERT"]
    assert spec["alpha"] == 0.05 and spec["levels"] == ["W", "S", "C"]
    # the extended tables: the paper's columns, then BLIP's and FLAVA's (on COCO in Table 6), under the main protocol
    extended = plan.table_spec("extended/table6")
    assert [(c["label"], c["dataset"]) for c in extended["columns"]] == [
        ("VisualBERT", "coco"), ("ViLBERT", "concap"), ("LXMERT", "coco"), ("VL-BERT", "concap"), ("BLIP", "coco"),
        ("FLAVA", "coco"), ("ViLT", "coco"), ("BridgeTower", "coco")]
    assert extended["protocol"] == main and extended["extended"] and extended["columns"][-1]["extended"]


def test_the_small_config_plans_every_grounded_job(small):
    plan = GroundedPlan(small)
    assert plan.targets() == ([table_path(f"table{n}", e) for n in range(3, 8) for e in EXTS]
                              + [table_path(f"paper/table{n}", e) for n in range(3, 8) for e in EXTS]
                              + [table_path(f"extended/table{n}", e) for n in range(3, 8) for e in EXTS]
                              + mleat_files("grounded", [f"{x}table{n}" for x in ("", "extended/") for n in range(3, 8)])
                              + ["results/grounded/comparison.csv", "results/grounded/comparison.md"])
    small = copy.deepcopy(small)
    small["stats"]["mleat"]["build"] = False  # the ML-EAT files on request only
    assert not [t for t in GroundedPlan(small).targets() if "/mleat/" in t]
    # the protocol's visualbert switch picks the column's model
    assert plan.models_on("authors")["VisualBERT"] == "visualbert-authors"
    assert plan.models_on("paper")["VisualBERT"] == "visualbert"
    spec = plan.table_spec("paper/table6")
    assert spec["protocol"] == "paper" and spec["table"] == "table6" and spec["masks"] == ["T", "I"]
    assert spec["columns"][1] == {"label": "ViLBERT", "model": None, "dataset": "concap"}  # no such dataset
    assert spec["results"] == [experiment_path("paper", "google", m) for m in ("lxmert", "visualbert", "vlbert")]
    assert spec["missing"] == [embedding_path("paper", "google", m, "missing.tsv")
                               for m in ("lxmert", "visualbert", "vlbert")]
    assert plan.table_spec("table3")["switches"]["token_mask"] == "word"  # the main protocol: authors
    assert set(plan.main_results()) == {experiment_path("authors", "google", m)
                                        for m in ("lxmert", "vilbert", "visualbert-authors", "vlbert")}
    assert set(plan.experiment_results()) == set(plan.main_results()) | {
        experiment_path("paper", "google", m) for m in ("lxmert", "vilbert", "visualbert", "vlbert")}
    # a table's ML-EAT files read one job's results per embedding file; the job computes every test a table
    # of its protocol shows from the file (Table 6 shows toy-a alone; Tables 3-5 and 7 both, as do the extended)
    assert plan.mleat_spec("table6")["results"] == [mleat_job_path("authors", "google", m)
                                                    for m in ("lxmert", "visualbert-authors", "vlbert")]
    assert plan.mleat_spec("extended/table6")["results"][0] == mleat_job_path("authors", "google", "blip")
    assert plan.mleat_job_tests("authors", "google", "lxmert") == ["toy-a", "toy-b"]
    # 8 embedding files x 2 tests x 3 levels, each once: one job per table computed 318 (4 tables x 4 files x
    # 2 tests, Table 6's 3 files x 1 test, the extended 8 and 7 files likewise, x 3 levels)
    assert plan.mleat_counts() == (48, 48)


def test_the_extended_tables_add_their_columns_to_the_main_protocols(small):
    plan = GroundedPlan(small)
    paper, extended = plan.table_spec("table5"), plan.table_spec("extended/table5")
    assert extended["columns"][:4] == paper["columns"] and not paper["extended"]
    assert extended["columns"][4:] == [
        {"label": "BLIP", "model": "blip", "dataset": "google", "extended": True},
        {"label": "FLAVA", "model": "flava", "dataset": "google", "extended": True},
        {"label": "ViLT", "model": "vilt", "dataset": "google", "extended": True},
        {"label": "BridgeTower", "model": "bridgetower", "dataset": "google", "extended": True},
        # a dual encoder: no job, its cells say why
        {"label": "CLIP", "model": "clip", "dataset": "google", "extended": True, "not_applicable": "n/a: dual encoder"}]
    assert extended["results"] == sorted(paper["results"] + [experiment_path("authors", "google", m)
                                                             for m in ("blip", "flava", "vilt", "bridgetower")])
    # Table 6's per-column datasets: the pixel models' from grounded/extended/datasets, CLIP has none: an empty column
    assert plan.table_spec("extended/table6")["columns"][4:] == [
        {"label": "BLIP", "model": "blip", "dataset": "google", "extended": True},
        {"label": "FLAVA", "model": "flava", "dataset": "google", "extended": True},
        {"label": "ViLT", "model": "vilt", "dataset": "google", "extended": True},
        {"label": "BridgeTower", "model": "bridgetower", "dataset": "google", "extended": True},
        {"label": "CLIP", "model": None, "dataset": None, "extended": True}]
    # the figures and the comparison of the paper's tables never read an extended model's results
    assert not any(m in f for f in plan.main_results() + plan.experiment_results() for m in ("blip", "flava", "vilt", "bridgetower"))


@pytest.mark.parametrize(("change", "message"), [
    (lambda g: g["extended"]["models"].append("blipp"), r"'grounded/extended/models/5': 'blipp' is not a model"),
    (lambda g: g["models"]["blip"].update(column="LXMERT"), r"'blip' fills column 'LXMERT', which is a column of "
                                                            r"the paper"),
    (lambda g: g["models"]["clip"].update(column="BLIP"), r"'clip' fills column 'BLIP', which another extended"),
    (lambda g: g["models"]["blip"].pop("detector"), r"'grounded/models/blip': needs 'detector'"),
])
def test_bad_extended_entries_are_input_errors(tmp_path, monkeypatch, change, message):
    from helpers.grounded import tiny_project

    tiny_project(tmp_path)
    with open(tmp_path / "config/config.yaml") as f:
        config = yaml.safe_load(f)
    change(config["grounded"])
    with pytest.raises(InputError, match=message):
        check_config(config, SCHEMA, root=tmp_path)


def test_the_grounded_embedding_inputs_per_wildcard(small):
    plan = GroundedPlan(small)
    assert plan.embed_stimuli("paper", "google", "lxmert") == [
        "resources/stimuli/grounded/google/toy-a.yaml", "resources/stimuli/grounded/google/toy-b.yaml"]
    assert plan.embed_stimuli("paper", "concap", "lxmert") == []
    assert plan.embed_regions("authors", "google", "visualbert-authors") == "results/regions/google/frcnn-tiny-36.h5"
    assert plan.embed_regions("paper", "google", "visualbert") == "results/regions/google/frcnn-tiny.h5"
    assert plan.embed_regions("paper", "google", "vilbert") == "results/regions/google/frcnn-tiny-36.h5"
    authors, paper = plan.embed_spec("authors", "google", "vilbert"), plan.embed_spec("paper", "google", "vilbert")
    assert (authors["ws_vector"], authors["vilbert_padding"], paper["ws_vector"]) == ("language+visual", "attended",
                                                                                     "language")
    assert authors["detector"] == "frcnn-tiny-36"  # the entry's own keys stay
    assert "ws_vector" not in plan.embed_spec("authors", "google", "visualbert")  # one stream


def test_a_table_naming_a_test_without_a_stimulus_file_is_an_input_error(small):
    small["grounded"]["tables"]["table4"]["groups"]["Race"] = ["toy-z"]
    with pytest.raises(InputError, match=r"config/config.yaml: key 'grounded/tables/table4/groups/Race' names "
                                         r"'toy-z', which has no stimulus file"):
        GroundedPlan(small).table_spec("table4")


# --- iEAT -------------------------------------------------------------------------------------------


def test_the_shipped_config_plans_the_ieat_tables(shipped, monkeypatch):
    from vlbias.suites.ieat.plan import IeatPlan

    monkeypatch.chdir(REPO)
    plan = IeatPlan(shipped)
    assert plan.targets() == ([f"results/ieat/{t}.{e}" for t in ("table1", "table2", "table3")
                               for e in ("csv", "md", "html", "missing.tsv")]
                              + ["results/ieat/specificity.csv", "results/ieat/specificity.html",
                                 "results/images/ieat/224px-center-bicubic-pil/manifest.tsv"]
                              + mleat_files("ieat", ["table1", "table2", "table3"]))
    # igpt-l: one entry, two outputs, one store; tables name the outputs
    assert plan.several_outputs == {"igpt-l": ["layer20", "logits"]}
    assert plan.table_models["igpt-l/logits"] == ("igpt-l", "logits") and "igpt-l" not in plan.table_models
    assert plan.paper_name("igpt-l/logits") == "igpt-logit" and plan.paper_name("igpt") == "igpt"
    assert plan.model_tests("igpt") == sorted(set(shipped["ieat"]["tables"]["table1"]["tests"])
                                              | set(shipped["ieat"]["tables"]["table2"]["tests"]))
    assert plan.model_tests("simclr-r152") == []  # no table names it
    assert plan.image_stores(["igpt", "igpt-l/layer20"]) == {
        "igpt-l/layer20": "results/images/ieat/32px-top-left-area-opencv/manifest.tsv"}  # its own images


def test_the_small_config_plans_the_ieat_inputs_per_wildcard(tmp_path, monkeypatch):
    from helpers.project import make_project

    from vlbias.suites.ieat.plan import IeatPlan

    config = make_project(tmp_path)
    config["ieat"]["models"]["tiny-clip"]["images"] = {"size": 48, "decoder": "opencv"}
    config["ieat"]["sweep"] = {"models": [{"arch": "RN50", "weights": "random", "name": "rn"}], "tests": "all"}
    monkeypatch.chdir(tmp_path)
    plan = IeatPlan(check_config(config, SCHEMA, root=tmp_path))
    assert plan.targets()[-16:] == ([f"results/ieat/sweep.{e}" for e in ("csv", "md", "png", "missing.tsv")]
                                    + mleat_files("ieat", ["t1", "t2", "sweep"]))
    assert plan.targets()[-17] == "results/images/ieat/32px-center-bicubic-pil/manifest.tsv"  # the default store
    # a model's own images settings over ieat/images: its own store, built beside the default one
    assert plan.image_store("tiny-clip") == "results/images/ieat/48px-center-bicubic-opencv"
    assert sorted(plan.image_stores_settings) == ["32px-center-bicubic-pil", "48px-center-bicubic-opencv"]
    assert plan.model_tests("tiny-clip") == ["flower-insect"]
    assert plan.model_tests("rn") == ["flower-insect", "insect-flower"]  # the sweep's: every test
    assert plan.model_tests("pub") == ["flower-insect", "insect-flower"]  # t1, t2 and the specificity test
    assert plan.table_stimuli(["insect-flower"], ["pub"]) == ["resources/stimuli/ieat/insect-flower.yaml"]
    assert plan.text_stimuli("tiny-clip") == []


def test_a_cross_modal_test_on_a_model_without_texts_fails_before_any_job(tmp_path, monkeypatch):
    from helpers.project import make_project, write_yaml

    from vlbias.suites.ieat.plan import IeatPlan

    config = make_project(tmp_path)
    write_yaml(tmp_path / "resources/stimuli/ieat/words.yaml", {
        "id": "words", "name": "Words", "suite": "ieat", "level": "cross-modal",
        "X": {"label": "flower", "category": "toy/flower"}, "Y": {"label": "insect", "category": "toy/insect"},
        "A": {"label": "Pleasant", "items": ["joy", "love"]}, "B": {"label": "Unpleasant", "items": ["pain", "hate"]}})
    monkeypatch.chdir(tmp_path)
    plan = IeatPlan(check_config(config, SCHEMA, root=tmp_path))
    assert plan.table_stimuli(["words"], ["tiny-clip"]) == ["resources/stimuli/ieat/words.yaml"]
    with pytest.raises(InputError, match="words.yaml: sets A, B are texts, and model 'pub' \\(published vectors\\)"):
        plan.table_stimuli(["words"], ["pub"])


def test_seat_targets_and_tests(shipped, monkeypatch):
    from vlbias.suites.seat.plan import seat_tests, targets

    monkeypatch.chdir(REPO)
    models = list(shipped["seat"]["models"])
    assert targets(shipped) == ([f"results/seat/{m}/table.{e}" for m in models for e in ("csv", "md", "html")]
                                + mleat_files("seat", models))
    config = copy.deepcopy(shipped)
    tests = seat_tests(config)  # all, in their natural order: weat10 after weat9, each sent- beside its word test
    weats = [t for t in tests if "weat" in t]
    assert weats[:5] == ["weat1", "sent-weat1", "weat2", "sent-weat2", "weat3"]
    assert weats[-4:] == ["weat9", "sent-weat9", "weat10", "sent-weat10"]
    assert tests.index("weat3b") == tests.index("sent-weat3") + 1 and len(tests) == len(set(tests)) == 46
    config["seat"]["tests"] = ["weat2", "weat1"]
    assert seat_tests(config) == ["weat2", "weat1"]  # as listed
    # a model entry's own tests: those it runs (e.g. one's own vectors of some tests); else seat/tests
    config["seat"]["models"]["mine"] = {"source": "vectors", "vectors": "v.csv", "tests": ["weat6", "sent-weat6"]}
    assert seat_tests(config, "mine") == ["weat6", "sent-weat6"] and seat_tests(config, "minilm") == ["weat2", "weat1"]
    config["seat"]["models"]["mine"]["tests"] = "all"
    assert seat_tests(config, "mine") == tests
    assert "results/seat/mine/table.csv" in targets(config) and targets(config)[-4:] == mleat_files("seat", ["mine"])



def test_the_robustness_target_is_out_of_the_default_target(shipped, monkeypatch):
    from vlbias.suites import robustness
    from vlbias.suites.registry import default_targets

    monkeypatch.chdir(REPO)
    assert robustness.targets(shipped) == [*(f"results/robustness/seat.{e}" for e in ("csv", "md", "html")),
                                           "results/robustness/seat/specifications.csv"]
    assert not [t for t in default_targets(shipped, {}) if t.startswith("results/robustness")]
    assert robustness.stimuli(shipped, "seat") == [f"resources/stimuli/seat/{t}.yaml" for t in ("weat6", "weat7", "weat8")]
    config = copy.deepcopy(shipped)
    config["robustness"]["seat"]["tests"] = "all"
    config["seat"]["tests"] = ["weat1"]
    # every test, in the SEAT table's order (each sent- beside its word test), whatever seat/tests lists
    assert robustness.tests(config, "seat")[:2] == ["angry_black_woman_stereotype", "sent-angry_black_woman_stereotype"]
    assert len(robustness.tests(config, "seat")) == 46
    del config["robustness"]
    assert robustness.targets(config) == []


def test_the_robustness_section_names_models_and_tests_it_has(shipped):
    config = copy.deepcopy(shipped)
    config["seat"]["models"]["mine"] = {"source": "vectors", "vectors": "v.csv"}
    config["robustness"]["seat"] = {"models": ["minilm", "minlm", "mine"], "tests": ["weat6", "weat66"]}
    with pytest.raises(InputError) as e:
        check_config(config, SCHEMA, root=REPO)
    problems = str(e.value)
    assert "key 'robustness/seat/models/1': 'minlm' is not a model under 'seat/models'" in problems
    assert "key 'robustness/seat/models/2': 'mine' is one's own vectors" in problems
    assert "key 'robustness/seat/tests/1': 'weat66' is not a stimulus file" in problems


def test_the_robustness_of_ieat_reads_each_models_image_store_and_one_output(shipped):
    from vlbias.suites import robustness

    config = copy.deepcopy(shipped)
    config["ieat"]["models"]["igpt-2"] = {**config["ieat"]["models"]["igpt-l"], "layer": [10, 20]}
    config["robustness"]["ieat"] = {"models": ["igpt", "igpt-2", "simclr-r152"], "tests": ["insect-flower"]}
    with pytest.raises(InputError) as e:
        check_config(copy.deepcopy(config), SCHEMA, root=REPO)
    assert "key 'robustness/ieat/models/0': 'igpt' is published vectors" in str(e.value)
    assert "key 'robustness/ieat/models/1': 'igpt-2' gives several vectors per image (layer10, layer20, logits)" in str(e.value)
    config["robustness"]["ieat"] = {"models": ["simclr-r152"], "tests": ["insect-flower"], "axes": {"crop": ["none"]}}
    config = check_config(config, SCHEMA, root=REPO)
    assert robustness.targets(config)[3:6] == [f"results/robustness/ieat.{e}" for e in ("csv", "md", "html")]
    assert robustness.inputs(config, "ieat")["stores"] == ["results/images/ieat/224px-top-left-area-opencv/manifest.tsv"]
    assert robustness.image_settings(config, "ieat") == {
        "simclr-r152": {"size": 224, "crop": "top-left", "resample": "area", "decoder": "opencv"}}
    # the suite's own axes in place of robustness/axes (the SEAT curves keep those)
    assert robustness.axes(config, "ieat")["crop"] == ["none"] and robustness.axes(config, "ieat")["template"] == []
    assert robustness.axes(config, "seat") == config["robustness"]["axes"]


def test_an_ieat_curve_reads_the_images_its_store_decoded():
    from vlbias.api import Query
    from vlbias.suites import robustness

    image = Query({"f": [Path("f.png")], "i": [Path("i.png")]}, {"p": [Path("p.png")], "u": [Path("u.png")]}).stimulus(
        "img")
    image = replace(image, **{s: replace(getattr(image, s), category=c)
                              for s, c in zip("XYAB", ("flower", "insect", "pleasant", "unpleasant"), strict=True)})
    words = Query({"x": ["a"], "y": ["b"]}, {"a": ["c"], "b": ["d"]}).stimulus("words")
    listed = [{"category": c, "file": f, "path": Path(f"/m/{c}/{f}")} for c, f in (
        ("flower", "1.png"), ("flower", "2.png"), ("insect", "1.png"), ("pleasant", "1.png"),
        ("unpleasant", "1.png"), ("unpleasant", "gone.jpg"), ("unpleasant", "page.jpg"))]
    status = [{"category": e["category"], "file": e["file"], "status": "ok"} for e in listed[:5]]
    status += [{"category": "unpleasant", "file": "gone.jpg", "status": "missing"},
               {"category": "unpleasant", "file": "page.jpg", "status": "corrupt"}]
    assert robustness.image_sets([image, words], listed, status) == {"img": {
        "X": ["/m/flower/1.png", "/m/flower/2.png"], "Y": ["/m/insect/1.png"], "A": ["/m/pleasant/1.png"],
        "B": ["/m/unpleasant/1.png"]}}


# --- grounded images and region stores ----------------------------------------------------------------


def test_the_grounded_images_and_region_stores_of_the_shipped_config(shipped, monkeypatch):
    from vlbias.regions.plan import RegionsPlan
    from vlbias.suites.grounded.plan import GroundedImagesPlan

    monkeypatch.chdir(REPO)
    images = GroundedImagesPlan(shipped)
    assert images.targets()[:3] == [f"results/images/grounded/google/{n}.tsv" for n in ("manifest", "failures",
                                                                                         "summary")]
    assert images.targets()[-1] == "results/grounded/table1.html"
    assert images.folder("/m", "google") == "/m/grounded/data/google-images"  # in the upstream repository's
    assert images.folder("/m", "coco") == "/m/coco/val2014"  # source: null
    assert "weat6" in images.tests("google")
    config = copy.deepcopy(shipped)
    config["grounded"]["images"]["datasets"]["google"]["tests"] = ["weat6", "weat99"]
    with pytest.raises(InputError, match=r"config/config.yaml: key 'grounded/images/datasets/google/tests' names "
                                         r"tests that .* does not list: \['weat99'\]"):
        GroundedImagesPlan(config).tests("google")
    regions = RegionsPlan(shipped)
    assert regions.manifest("mlm") == "resources/manifests/mlm_case_study.tsv"  # regions/manifests
    assert regions.manifest("google") == "results/images/grounded/google/manifest.tsv"  # the grounded rules'
    assert regions.targets() == []
    source = next(iter(regions.tsv))
    dataset = next(iter(regions.tsv[source]["files"]))
    assert regions.tsv_file(source, dataset) == regions.tsv[source]["files"][dataset]
    with pytest.raises(InputError, match=rf"key 'regions/tsv/{source}/files' names no TSV file for dataset 'nope'"):
        regions.tsv_file(source, "nope")


# --- masked-entity association ------------------------------------------------------------------------


def test_the_mlm_jobs_of_the_shipped_config(shipped, monkeypatch, tmp_path):
    from vlbias.suites.mlm.plan import MlmPlan

    monkeypatch.chdir(REPO)
    plan = MlmPlan(shipped)
    assert plan.targets() == []  # mlm/build lists none
    assert plan.outputs("lxmert")[0] == "results/mlm/lxmert/scores.csv"
    assert plan.outputs("lxmert")[-1] == "results/mlm/logprobs/lxmert.images.tsv"
    stimuli = [shipped["mlm"]["case_study"], shipped["mlm"]["entities"]]
    assert plan.logprobs_inputs("bert") == {"stimuli": stimuli}  # the text-only reference reads no images
    manifest = "resources/manifests/mlm_case_study.tsv"
    assert plan.logprobs_inputs("lxmert") == {"stimuli": stimuli, "manifest": manifest}  # placeholders only
    # a manifest with a usable image: the model's detector's region store too
    config = copy.deepcopy(shipped)
    (tmp_path / "m.tsv").write_text("test\trole\tfile\tstatus\nnurse\tfemale\ta.jpg\tok\n")
    config["regions"]["manifests"]["mlm"] = str(tmp_path / "m.tsv")
    detector = config["mlm"]["models"]["lxmert"]["detector"]
    assert MlmPlan(config).logprobs_inputs("lxmert")["store"] == f"results/regions/mlm/{detector}.h5"


# --- the weights records the targets need (rule weights; vlbias.weights) --------------------------------


def test_the_weights_of_the_shipped_config_are_those_of_its_targets(shipped, monkeypatch):
    from vlbias.regions.plan import RegionsPlan
    from vlbias.suites.ieat.plan import IeatPlan
    from vlbias.suites.mlm.plan import MlmPlan
    from vlbias.weights import record_path
    from vlbias.suites.seat.plan import weights as seat_weights

    monkeypatch.chdir(REPO)
    # igpt-l and simclr-r152 are configured, but no table reads them yet: nothing to fetch
    assert IeatPlan(shipped).weights() == []
    assert GroundedPlan(shipped).weights() == MlmPlan(shipped).weights() == RegionsPlan(shipped).weights() == []
    assert seat_weights(shipped) == [record_path(f"seat/{m}") for m in shipped["seat"]["models"]]
    config = copy.deepcopy(shipped)
    config["ieat"]["tables"]["table3"]["models"].append("igpt-l/logits")  # an output names its entry
    config["ieat"]["specificity"]["models"].append("simclr-r152")
    assert IeatPlan(config).weights() == [record_path("ieat/igpt-l"), record_path("ieat/simclr-r152")]
    # mlm: the built model, the reference its report reads, and the detector of its region store
    config["mlm"]["build"] = ["lxmert"]
    detector = config["mlm"]["models"]["lxmert"]["detector"]
    assert MlmPlan(config).weights() == sorted([record_path("mlm/lxmert"), record_path("mlm/bert"),
                                                record_path(f"regions/{detector}")])
    config["regions"]["build"] = [{"dataset": "mlm", "detector": "bua-36"}]
    assert RegionsPlan(config).weights() == [record_path("regions/bua-36")]


def test_the_grounded_weights_are_the_models_switched_on_and_their_detectors(small, shipped, monkeypatch):
    from vlbias.weights import record_path

    # every model of the small project is on under some protocol or in the extended tables (but the dual
    # encoder there, clip: its cells are n/a, no job loads it), and reads one of its two detectors
    extended = small["grounded"]["extended"]["models"]
    assert "clip" in extended and small["grounded"]["models"]["clip"]["adapter"] == "open_clip"
    models = small["grounded"]["experiments"]["models"] + [m for m in extended if m != "clip"]
    assert GroundedPlan(small).weights() == sorted(
        [record_path(f"grounded/{m}") for m in models]
        + [record_path(f"regions/{d}") for d in ("frcnn-tiny", "frcnn-tiny-36")])
    # the shipped config: vilbert-12in1 is configured but off; LXMERT's released COCO features are a
    # TSV file (regions/tsv), no detector's weights
    monkeypatch.chdir(REPO)
    config = copy.deepcopy(shipped)
    config["grounded"]["experiments"]["build"] = True
    records = GroundedPlan(config).weights()
    assert record_path("grounded/vilbert-12in1") not in records
    assert {record_path(f"grounded/{m}") for m in config["grounded"]["experiments"]["models"]
            + config["grounded"]["extended"]["models"]} <= set(records)
    assert record_path(f"regions/{config['grounded']['models']['lxmert']['released_regions']['coco']}") not in records
    assert {record_path(f"regions/{d}") for d in ("bua-10-100", "detectron-fpn")} <= set(records)


# --- where the upstream files come from: the mirror, or the network ---------------------------------------


def test_mirror_auto_is_the_shared_mirror_where_it_exists(tmp_path, monkeypatch):
    from vlbias.suites.plan import mirror

    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")  # Snakemake's working directory
    assert mirror({"mirror": "auto"}) is None  # a clone from anywhere: the pinned commits
    (tmp_path / "shared/data").mkdir(parents=True)
    assert mirror({"mirror": "auto"}) == str(tmp_path / "shared/data")
    assert mirror({"mirror": None}) is None
    assert mirror({"mirror": "mine"}) == str(tmp_path / "project/mine")  # a path as given, there or not


def closed_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nobody listens there


def test_offline_asks_the_sources_first_and_the_image_hosts_only_when_they_fail(tmp_path, monkeypatch, http_server):
    from vlbias.suites.plan import offline

    monkeypatch.chdir(tmp_path)
    dead = f"http://127.0.0.1:{closed_port()}"
    config = {"mirror": "auto", "sources": {
        name: {"repo": f"o/{name}", "commit": "0" * 40, "mirror_name": name, "url_template": dead + "/{path}"}
        for name in ("ieat", "grounded")}}
    asked = []

    def probe_urls(dataset):
        asked.append(dataset)
        return {"down": [dead + "/a.jpg", dead + "/b.jpg"], "half": [dead + "/a.jpg", http_server.url("b.jpg")]}[dataset]

    down = offline(config, ["down", "half"], probe_urls)
    assert set(down) == {("sources", "ieat"), ("sources", "grounded"), ("images", "down")}
    assert all("connection refused" in why for why in down.values())
    assert asked == ["down", "half"]
    # a mirror: nothing asked
    asked.clear()
    assert offline({**config, "mirror": str(tmp_path / "mirror")}, ["down"], probe_urls) == {} and asked == []
    # a network (GitHub answers): dead image sites are failures to record, not a missing network
    live = {name: {**spec, "url_template": http_server.url("{path}")} for name, spec in config["sources"].items()}
    assert offline({**config, "sources": live}, ["down"], probe_urls) == {} and asked == []


def test_the_offline_line_names_what_it_tried_what_it_left_out_and_what_to_do():
    from vlbias.suites.plan import offline_line

    config = {"mirror": "auto", "sources": {
        "ieat": {"repo": "ryansteed/ieat", "commit": "4d7639bfd0b6c17b127ce163af0ddf985f5a6510", "mirror_name": "ieat"},
        "grounded": {"repo": "x/g", "commit": "1" * 40, "mirror_name": "grounded"}}}
    down = {("sources", "ieat"): "connection refused", ("sources", "grounded"): "connection refused",
            ("images", "google"): "connection refused"}
    line = offline_line(config, down, ["results/ieat/table1.csv", "results/ieat/table1.md",
                                       "results/images/ieat/224px/manifest.tsv", "results/grounded/table1.csv"])
    assert "\n" not in line
    assert line.startswith("offline: no answer from raw.githubusercontent.com (ryansteed/ieat, x/g at the pinned "
                           "commits) nor the image hosts of the grounded google dataset (connection refused)")
    assert "no data mirror at ../shared/data" in line
    assert "left out the 4 target(s) that need them (results/ieat/, results/images/ieat/, results/grounded/)" in line
    assert line.endswith("Put the mirror at ../shared/data, set `mirror:` in config/config.yaml to its path, or run "
                         "with a network.")
    assert "`mirror: null`" in offline_line({**config, "mirror": None}, down, ["results/ieat/t.csv"])


def test_without_upstream_the_plans_keep_what_needs_none(shipped, tmp_path, monkeypatch):
    from helpers.project import make_project

    from vlbias.suites.grounded.plan import GroundedImagesPlan
    from vlbias.suites.ieat.plan import IeatPlan

    monkeypatch.chdir(REPO)
    assert IeatPlan(shipped).targets(upstream=False) == []  # the authors' vectors and images: all upstream
    images = GroundedImagesPlan(shipped)
    assert not [t for t in images.targets(offline=["google"]) if "/google/" in t or "table1" in t]
    assert [t for t in images.targets(offline=["google"]) if "/coco/" in t]
    assert len(images.probe_urls("google")) == 8 and len({u.split("/")[2] for u in images.probe_urls("google")}) == 8
    config = make_project(tmp_path)  # a table of one's own vectors needs nothing upstream
    (tmp_path / "v.csv").write_text("id,0,1\n")
    config["ieat"]["models"]["mine"] = {"source": "vectors", "vectors": "v.csv"}
    config["ieat"]["tables"]["own"] = {"caption": "mine", "models": ["mine"], "tests": ["insect-flower"]}
    monkeypatch.chdir(tmp_path)
    plan = IeatPlan(check_config(config, SCHEMA, root=tmp_path))
    assert plan.targets(upstream=False) == ([f"results/ieat/own.{e}" for e in ("csv", "md", "html", "missing.tsv")]
                                            + mleat_files("ieat", ["own"]))


def test_the_skew_target_is_out_of_the_default_and_skips_the_absent_sets(shipped, tmp_path, monkeypatch):
    from vlbias.suites.registry import default_targets, weights_records
    from vlbias.suites.skew.plan import SKIPPED, SkewPlan, table_path as skew_table

    monkeypatch.chdir(REPO)
    assert not [t for t in default_targets(shipped, {}) if "skew" in str(t)]
    assert not [r for r in weights_records(shipped) if "skew" in str(r)]
    plan = SkewPlan(shipped)
    assert set(plan.absent) == {"fairface", "utkface"} and plan.targets() == [SKIPPED]
    assert "fairface_label_val.csv" in plan.absent["fairface"] and "provide" in plan.absent["fairface"]
    assert [str(r) for r in plan.weights()] == ["results/weights/skew/vit-b-16-openai.json"]
    # a set at hand: its table and the bridge; the folder under the mirror
    (tmp_path / "faces").mkdir()
    (tmp_path / "labels.csv").write_text("path,g\n")
    config = copy.deepcopy(shipped)
    config["mirror"] = str(tmp_path)
    config["skew"]["datasets"]["mine"] = {"format": "csv", "labels": str(tmp_path / "labels.csv"),
                                          "mirror_dir": "faces", "manifest": None, "attributes": {"g": ["a", "b"]}}
    plan = SkewPlan(config)
    assert plan.present == ["mine"] and plan.folder("mine") == str(tmp_path / "faces")
    assert plan.targets() == [skew_table("mine", e) for e in ("csv", "md", "png")] + [
        SKIPPED, skew_table("propagation"), skew_table("propagation", "png")]
    assert plan.query_files() == ["results/skew/queries/berg.csv"]
