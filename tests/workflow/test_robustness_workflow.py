"""The robustness target through the real Snakefile on the default tiny project (helpers.project): the SEAT
curve of the MiniLM along its penultimate layer, and the iEAT curve of the tiny open_clip along the image
axes (resize only, bilinear) with a random-init twin, each suite's own axes; each default d is the one its
suite's table printed. (The MiniLM's twins: tests/test_robustness.py, without Snakemake.)"""

import pandas as pd
import pytest
import yaml
from helpers.project import copy_project, job_counts, snakemake, write_yaml

pytestmark = pytest.mark.workflow

QUICK = {"subsample": {"draws": 0}, "n_samples": 100, "ci": {"n_boot": 100}}


def test_the_robustness_target_builds_a_curve_per_suite(built_project, tmp_path):
    root = copy_project(built_project, tmp_path)
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    config["robustness"] = {
        "seat": {"models": ["minilm"], "tests": ["weat-toy"], "axes": {**QUICK, "layer": ["penultimate"]}},
        "ieat": {"models": ["tiny-clip"], "tests": ["flower-insect"],
                 "axes": {**QUICK, "crop": ["none"], "resample": ["bilinear"], "twins": 1, "twin_seed": 5}}}
    write_yaml(root / "config/config.yaml", config)
    run = snakemake(root, "robustness")
    assert job_counts(run.stderr) == {"robustness": 1, "robustness_suite": 2}  # the tables' vectors as built

    curve = pd.read_csv(root / "results/robustness/seat/specifications.csv", keep_default_na=False)
    assert curve["layer"].tolist() == ["", "penultimate"] and curve["d"].nunique() == 2 and not curve["twin"].any()
    table = pd.read_csv(root / "results/seat/minilm/table.csv").set_index("test")
    assert curve.loc[curve["default"], "d"].item() == table.loc["weat-toy", "d"]

    ieat = pd.read_csv(root / "results/robustness/ieat/specifications.csv", keep_default_na=False)
    curve = ieat[~ieat["twin"]]
    assert curve[["crop", "resample"]].values.tolist() == [["", ""], ["", "bilinear"], ["none", ""],
                                                            ["none", "bilinear"]]
    assert ieat.loc[ieat["twin"], ["weights", "weights_seed"]].values.tolist() == [["random-init", 5]]
    table = pd.read_csv(root / "results/ieat/t1.csv").set_index(["test", "model"])
    # the default reads the images the iEAT table read, at its store's settings
    assert curve.loc[curve["default"], ["d", "n_x", "n_a"]].values.tolist() == [
        table.loc[("flower-insect", "tiny-clip"), ["d", "n_x", "n_a"]].tolist()]
    summary = pd.read_csv(root / "results/robustness/ieat.csv")
    assert summary[["test", "model", "n_specs", "twins"]].values.tolist() == [["flower-insect", "tiny-clip", 4, 1]]
    for path in ("seat/curves/minilm/weat-toy.png", "ieat/curves/tiny-clip/flower-insect.png", "ieat.md", "ieat.html"):
        assert (root / "results/robustness" / path).is_file(), path
