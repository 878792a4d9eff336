"""The stages of the workflow, declared once (vlbias.suites.stage, vlbias.suites.registry): the config
check, the weights entries, the command line and the default target read every suite through its
descriptor, so a suite added to the registry is checked, fetched, listed and built with no edit
anywhere else."""

import copy

import pytest
import yaml
from helpers import REPO

import vlbias.config
from vlbias import cli
from vlbias.config import ConfigError, check_config
from vlbias.errors import InputError
from vlbias.suites import registry
from vlbias.suites.stage import Suite, Table, unknown_names
from vlbias.weights import kind_of, record_path

SCHEMA = REPO / "workflow/schemas/config.schema.yaml"
CONFIG = yaml.safe_load((REPO / "config/config.yaml").read_text())


@pytest.fixture(scope="module")
def shipped():
    return check_config(copy.deepcopy(CONFIG), SCHEMA, root=REPO)


def test_every_rule_file_is_one_stages_or_shared():
    files = sorted(p.name for p in (REPO / "workflow/rules").glob("*.smk"))
    assert sorted([*registry.rule_files(), "common.smk", "weights.smk"]) == files
    assert len(set(registry.rule_files())) == len(registry.rule_files())


def test_each_stages_section_and_adapter_sections_are_the_schemas():
    schema = yaml.safe_load(SCHEMA.read_text())
    for path, kind in registry.adapter_sections():
        node = schema
        for key in path:
            node = node["properties"][key]
        assert node["type"] in ("object", "array"), path
        assert kind in ("models", "detectors")
    assert {stage.name for stage in registry.STAGES} <= set(schema["properties"])


def test_the_weights_stage_gives_each_stages_entries_their_kind():
    # vlbias.weights knows no stage but the detectors' (it imports nothing above it): both must agree
    kinds = {stage.name: stage.kind for stage in registry.STAGES if stage.adapters}
    assert kinds["regions"] == "detectors" and set(kinds.values()) == {"models", "detectors"}
    for name, kind in kinds.items():
        assert kind_of(f"{name}/entry") == kind


def test_the_default_target_is_every_stages_and_what_is_down_is_left_out(shipped, monkeypatch):
    monkeypatch.chdir(REPO)
    config = copy.deepcopy(shipped)
    config["grounded"]["experiments"]["build"] = True
    config["mlm"]["build"] = ["lxmert"]
    everything = registry.default_targets(config, {})
    assert everything == [t for stage in registry.STAGES for t in stage.targets(config, {})]
    # each figure the report shows as a page is a target too: an older results folder builds it (else the report
    # stops at a page it marks that does not exist)
    assert {"results/ieat/heatmap.png", "results/seat/heatmap.png", "results/grounded/heatmap.png",
            "results/ieat/heatmap.html", "results/seat/heatmap.html", "results/grounded/heatmap.html",
            "results/grounded/table1.csv", "results/grounded/table3.csv", "results/mlm/lxmert/scores.csv"} <= set(everything)
    # the iEAT authors' repository down: no iEAT table (all read it), nor their figures; the rest stays
    down = registry.default_targets(config, {("sources", "ieat"): "connection refused"})
    assert not [t for t in down if t.startswith(("results/ieat/", "results/images/ieat/"))]
    assert [t for t in everything if not t.startswith(("results/ieat/", "results/images/ieat/"))] == down
    # a grounded dataset's images down: its images, Table 1, Tables 3-7 and the figures left out
    down = registry.default_targets(config, {("images", "google"): "connection refused"})
    assert "results/images/grounded/coco/manifest.tsv" in down and "results/mlm/lxmert/scores.csv" in down
    assert not [t for t in down if "/google/" in t or t.startswith("results/grounded/")]
    # an absent section: nothing of its stage
    del config["mlm"]
    assert not [t for t in registry.default_targets(config, {}) if t.startswith("results/mlm/")]
    assert not [name for name in registry.weights_entries(config) if name.startswith("mlm/")]


def test_list_and_show_read_every_suite_mlm_included(shipped, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    assert cli.main(["list", "tables"]) == 0
    tables = capsys.readouterr().out.splitlines()
    assert {line.split("\t")[0] for line in tables} == {"ieat", "seat", "grounded", "mlm"}
    assert ("mlm\tlxmert/scores\tresults/mlm/lxmert/scores.csv\tAssociation scores S(E, g) of the case study: "
            "lxmert") in tables
    assert "grounded\tpaper/table3\tresults/grounded/paper/table3.csv\t" in "\n".join(tables)
    assert cli.main(["list", "tests"]) == 0
    assert "mlm\tentities\tresources/stimuli/mlm/entities.yaml\n" in capsys.readouterr().out
    assert cli.main(["list", "models"]) == 0
    assert "mlm\tbert\tbert_mlm\t" in capsys.readouterr().out
    assert cli.main(["show", "lxmert/scores"]) == 2  # known by its name, not built here
    assert "results/mlm/lxmert/scores.csv: not built yet" in capsys.readouterr().err


# --- a suite added to the registry: nothing else edited -----------------------------------------------------


def toy_check(config, root):
    problems = []
    unknown_names(problems, ("toy", "tables"), config["toy"]["tables"], config["toy"]["models"], "a model under 'toy/models'")
    return problems


TOY = Suite(
    name="toy", rules=("toy.smk",), adapters={"models": "models"}, check=toy_check,
    targets=lambda config, down: [f"results/toy/{m}.csv" for m in config["toy"]["tables"]],
    weights=lambda config: [record_path(f"toy/{m}") for m in config["toy"]["tables"]],
    tests=lambda config: [("toy", "weat1", "resources/stimuli/seat/weat1.yaml")],
    tables=lambda config: {m: Table(f"results/toy/{m}.csv", f"Toy tests on {m}") for m in config["toy"]["tables"]},
)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The registry with the toy suite; the schema with its section (a suite's config and schema)."""
    monkeypatch.setattr(registry, "STAGES", (*registry.STAGES, TOY))
    schema = yaml.safe_load(SCHEMA.read_text())
    schema["properties"]["toy"] = {
        "type": "object", "additionalProperties": False, "required": ["models", "tables"],
        "properties": {"models": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["adapter"], "properties": {"adapter": {"$ref": "#/$defs/model_adapter"}}}},
                       "tables": {"type": "array", "items": {"type": "string"}}}}
    (tmp_path / "schema.yaml").write_text(yaml.safe_dump(schema))
    for module in (cli.common, vlbias.config):  # the commands' help texts, the config's loader
        monkeypatch.setattr(module, "schema_path", lambda: tmp_path / "schema.yaml")
    config = copy.deepcopy(CONFIG)
    config["toy"] = {"models": {"mini": {"adapter": "sentence", "path": "x/mini", "model_id": "x/mini"}}, "tables": ["mini"]}
    monkeypatch.chdir(REPO)
    return config, tmp_path


def test_a_suite_in_the_registry_is_checked_fetched_built_and_listed(toy, capsys):
    config, tmp = toy
    schema = tmp / "schema.yaml"
    # the config check: its adapter entries against their adapter's schema (pass 2), its references (pass 3)
    bad = copy.deepcopy(config)
    bad["toy"]["models"]["mini"]["poolng"] = "cls"
    with pytest.raises(ConfigError) as e:
        check_config(bad, schema, root=REPO)
    assert e.value.problems == ["key 'toy/models/mini/poolng': unknown key (did you mean 'pooling'?)"]
    bad = copy.deepcopy(config)
    bad["toy"]["tables"] = ["mimi"]
    with pytest.raises(ConfigError) as e:
        check_config(bad, schema, root=REPO)
    assert e.value.problems == ["key 'toy/tables/0': 'mimi' is not a model under 'toy/models' (did you mean 'mini'?)"]
    checked = check_config(config, schema, root=REPO)
    # its weights entries, the records and the files of the default target, its rule file
    assert registry.weights_entries(checked)["toy/mini"]["model_id"] == "x/mini"
    assert record_path("toy/mini") in registry.weights_records(checked)
    assert registry.default_targets(checked, {})[-1] == "results/toy/mini.csv"
    assert registry.rule_files()[-1] == "toy.smk"
    # the command line: its models, tests and tables, and a table by its name
    (tmp / "config.yaml").write_text(yaml.safe_dump(config))
    for what, line in [("models", "toy\tmini\tsentence\tx/mini"), ("tests", "toy\tweat1\tresources/stimuli/seat/weat1.yaml"),
                       ("tables", "toy\tmini\tresults/toy/mini.csv\tToy tests on mini")]:
        assert cli.main(["list", what, "--config", str(tmp / "config.yaml")]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == line
    assert cli.main(["show", "toy/mini", "--config", str(tmp / "config.yaml")]) == 2
    assert "results/toy/mini.csv: not built yet" in capsys.readouterr().err


def test_a_stimulus_of_a_new_suite_on_the_weat_format_loads_and_names_a_suite_of_the_registry(toy):
    from vlbias.io.stimuli import load_stimulus

    _, tmp = toy
    text = (REPO / "resources/stimuli/seat/weat1.yaml").read_text()
    assert "\nsuite: seat\n" in text
    for suite in ("toy", "tyo"):
        (tmp / suite).mkdir()
        (tmp / suite / "weat1.yaml").write_text(text.replace("\nsuite: seat\n", f"\nsuite: {suite}\n"))
    registry.check_suite(load_stimulus(tmp / "toy/weat1.yaml"))  # the registry's line alone: no schema to edit
    with pytest.raises(InputError, match=r"weat1.yaml: key 'suite': 'tyo' is not a suite of the registry "
                                         r"\(known: ieat, seat, grounded, mlm, zoo, toy\) \(did you mean 'toy'\?\)"):
        registry.check_suite(load_stimulus(tmp / "tyo/weat1.yaml"))
