"""Retrieval skew through the real Snakefile (`snakemake skew`): three tiny random open_clip models over a
generated labelled set, Berg et al.'s prompt templates (a tiny stand-in, pinned by sha256 in the mirror) and a
query file of one's own. The set's images are two colours: the attribute ``planted`` is the colour (the image
vectors carry the label's direction, so a query ranks one value first), ``control`` is drawn apart from it.
An absent FairFace is one line and a row of skipped.tsv, the rest built; a bad labels CSV fails its job
with one line and leaves no store."""

import copy

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.project import make_project, sha, snakemake, write_yaml
from helpers.tiny import TINY_OPEN_CLIP_TEXT
from PIL import Image

from vlbias.io.fetch import read_manifest
from vlbias.io.store import read_provenance

pytestmark = pytest.mark.workflow

N = 40  # images: 20 of each colour
MODELS = {f"tiny-clip-{seed}": {**copy.deepcopy(TINY_OPEN_CLIP_TEXT), "seed": seed, "batch_size": 20,
                                "model_id": f"tiny random open_clip {seed}"} for seed in range(3)}


def make(root):
    config = make_project(root)
    rng = np.random.default_rng(0)
    faces = root / "mirror" / "toy-faces"
    faces.mkdir(parents=True)
    rows = ["path,planted,control"]
    control = rng.permutation(np.arange(N) % 2)
    for i in range(N):
        colour = np.array([200, 40, 40] if i % 2 else [40, 40, 200])
        pixels = np.clip(colour + rng.normal(0, 12, (16, 16, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(faces / f"{i}.png")
        rows.append(f"{i}.png,{'red' if i % 2 else 'blue'},{'x' if control[i] else 'y'}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    (root / "bad.csv").write_text("path,planted,control\n0.png,red,x\nmissing.png,blue,y\n")
    templates = root / "mirror" / "dvl" / "data" / "prompt_templates.csv"
    templates.parent.mkdir(parents=True)
    templates.write_text("template,concept\nA photo of a {} person,good\n  This person is {},smart\n")
    (root / "resources/manifests/prompts.tsv").write_text(
        f"source\tpath\tsha256\ndvl\tdata/prompt_templates.csv\t{sha(templates)}\n")
    write_yaml(root / "queries.yaml", {"id": "mine", "queries": ["a doctor", "a nurse", "a pilot"]})
    (root / "d.csv").write_text("test,model,d\ntoy-eat,tiny-clip-0,0.2\ntoy-eat,tiny-clip-1,0.9\n"
                                "toy-eat,tiny-clip-2,0.5\n")
    (root / "published.tsv").write_text("paper_model\tdataset\tattribute\tqueries\tmeasure\tk\tvalue\tsource\n"
                                        "printed\ttoy\tplanted\tberg\tmax_skew\t5\t0.25\ta toy paper\n")
    config["sources"]["dvl"] = {"repo": "oxai/debias-vision-lang", "commit": "0" * 40, "mirror_name": "dvl"}
    attributes = {"planted": ["red", "blue"], "control": ["x", "y"]}
    config["skew"] = {
        "models": copy.deepcopy(MODELS) | {"tiny-clip-0": {**copy.deepcopy(MODELS["tiny-clip-0"]), "paper": "printed"}},
        "datasets": {"toy": {"format": "csv", "labels": "labels.csv", "mirror_dir": "toy-faces",
                             "attributes": attributes},
                     "fairface": {"format": "fairface", "mirror_dir": "fairface", "attributes": ["gender"]}},
        "queries": {"berg": {"source": "dvl", "path": "data/prompt_templates.csv"}, "mine": {"file": "queries.yaml"}},
        "prompts_manifest": "resources/manifests/prompts.tsv", "published": "published.tsv",
        "images": {"size": 32}, "k": [5, 20], "n_permutations": 200, "n_bootstrap": 50,
        "propagation": {"eat": "d.csv", "k": 5, "map": [{"attribute": "control", "queries": "mine", "test": "toy-eat"}]},
    }
    write_yaml(root / "config/config.yaml", config)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("skew-project")
    make(root)
    targets = ["results/skew/toy.csv", "results/skew/skipped.tsv", "results/skew/propagation.csv"]
    return root, snakemake(root, *targets)


def test_the_planted_skew_stands_above_the_null_and_the_control_inside(project):
    root, _ = project
    table = pd.read_csv(root / "results/skew/toy.csv")
    assert len(table) == 3 * 2 * 2 * 2  # models x attributes x prompt sets x k
    planted, control = table[table["attribute"] == "planted"], table[table["attribute"] == "control"]
    for measure in ("max_skew", "ndkl"):
        assert (planted[measure] > planted[f"{measure}_null_bound"]).all(), planted[[measure, f"{measure}_null_bound"]]
        assert (planted[f"{measure}_p"] < 0.05).all()
        assert (control[f"{measure}_p"] > 0.05).all(), control[[measure, f"{measure}_p"]]
    # 20 of each colour: a top 5 of one colour is ln(1 / 0.5)
    top = planted[planted["k"] == 5]
    assert (top["max_skew"] > 0.5).all() and (top["max_skew"] <= np.log(2) + 1e-9).all()
    row = table.iloc[0]
    assert (row.n_images, row.desired, row.ties, row.n_permutations, row.seed) == (N, "equal", "all", 200, 0)
    assert row.model_id == "tiny random open_clip 0" and row["values"] in ("red=20; blue=20", "x=20; y=20")
    printed = table[(table["model"] == "tiny-clip-0") & (table["attribute"] == "planted") & (table["queries"] == "berg")
                    & (table["k"] == 5)]
    assert printed["max_skew_paper"].tolist() == [0.25] and printed["paper_source"].tolist() == ["a toy paper"]
    assert table.loc[table["model"] != "tiny-clip-0", "max_skew_paper"].isna().all()
    assert (root / "results/skew/toy.md").read_text().startswith("**Zero-shot retrieval skew over toy**")
    assert (root / "results/skew/toy.png").stat().st_size > 0


def test_the_queries_and_images_are_embedded_once_per_model_and_set(project):
    root, _ = project
    store = root / "results/embeddings/skew/toy/tiny-clip-1.h5"
    import h5py

    with h5py.File(store) as f:
        assert f["images/vectors"].shape == (N, 16)
        assert f["queries/berg/vectors"].shape == (4, 16) and f["queries/mine/vectors"].shape == (3, 16)
    assert read_provenance(store)["model_id"] == "tiny random open_clip 1"


def test_an_absent_fairface_is_one_line_and_the_rest_built(project):
    root, run = project
    skipped = read_manifest(root / "results/skew/skipped.tsv")
    assert [r["dataset"] for r in skipped] == ["fairface"]
    lines = [line for line in run.stderr.splitlines() if "skew dataset 'fairface'" in line]
    assert len(lines) >= 1 and "fairface_label_val.csv" in lines[0] and "provide" in lines[0]
    assert not (root / "results/skew/fairface.csv").exists()


def test_the_bridge_correlates_d_with_skew_across_the_models(project):
    root, _ = project
    table = pd.read_csv(root / "results/skew/propagation.csv")
    assert sorted(table["model"]) == ["tiny-clip-0", "tiny-clip-1", "tiny-clip-2"]
    skew = pd.read_csv(root / "results/skew/toy.csv")
    # the control's MaxSkew differs by model (the planted one is ln 2 on all three: no r)
    mine = skew[(skew["attribute"] == "control") & (skew["queries"] == "mine") & (skew["k"] == 5)]
    expected = np.corrcoef(mine.set_index("model").loc[table["model"], "max_skew"], table["d"])[0, 1]
    assert table["r"].iloc[0] == pytest.approx(expected) and (table["n_models"] == 3).all()
    assert (root / "results/skew/propagation.png").stat().st_size > 0


def test_a_labels_csv_naming_a_missing_file_fails_in_one_line(project):
    root, _ = project
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    config["skew"]["datasets"]["bad"] = {**config["skew"]["datasets"]["toy"], "labels": "bad.csv"}
    write_yaml(root / "config/config.yaml", config)
    run = snakemake(root, "results/images/skew/bad/manifest.tsv", check=False)
    assert run.returncode != 0
    assert "bad.csv: line 3: 'missing.png' is no file in" in run.stderr
    assert not (root / "results/images/skew/bad").exists() or not any((root / "results/images/skew/bad").iterdir())
