"""iEAT from pixels through the real Snakefile: tiny random iGPT (two layers and the logits from one
pass), SimCLRv2, open_clip and transformers CLIP (hf_dual) models beside the published vectors in
Tables 1-3, a user's own vectors (iEAT and SEAT), the transformers CLIP in SEAT too, a cross-modal
test, and the sweep's table and heatmap: an open_clip and transformers SigLIP 2, BLIP ITC and FLAVA
models side by side; BLIP's ITC in SEAT and FLAVA's contrastive space in the cross-modal table too.
The ML-EAT of Table 1 (every kind of model) and of the sweep (the joint spaces); every table's ML-EAT in
the default target is tests/workflow/test_workflow.py's."""

import copy

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.tiny import TINY_DUAL, TINY_DUAL_CONTEXT, tiny_dual_dir
from helpers.project import make_project, planned_jobs, snakemake, write_yaml

from vlbias.io.fetch import read_manifest
from vlbias.io.store import read_provenance, read_set
from vlbias.models.hf_dual import write_processor
from vlbias.report.mleat import map_path
from vlbias.stats.mleat import PATTERNS
from vlbias.stats import effect_size
from vlbias.stats.adjust import holm

pytestmark = pytest.mark.workflow

TEXT_CFG = {"context_length": 16, "width": 16, "heads": 2, "layers": 1}  # OpenAI's tokenizer: 49408 ids
CLIP = {"source": "images", "adapter": "open_clip", "arch": "tiny-vit", "weights": "random", "seed": 0,
        "batch_size": 4, "model_cfg": {"embed_dim": 16, "text_cfg": TEXT_CFG,
                                       "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "patch_size": 8,
                                                      "head_width": 16}}}
IGPT = {"source": "images", "adapter": "igpt", "weights": "random", "seed": 0, "clusters": "random",
        "config": {"n_embd": 16, "n_layer": 3, "n_head": 2, "n_positions": 64, "vocab_size": 17},
        "layer": [0, 1], "output": ["hidden", "logits"], "paper": {"layer1": "pub", "logits": "pub"},
        "images": {"size": 8, "crop": "top-left", "resample": "area", "decoder": "opencv"},
        "model_id": "tiny random iGPT"}
SIMCLR = {"source": "images", "adapter": "simclr", "depth": 50, "width": 1, "sk": 0, "weights": "random",
          "image_size": 32, "batch_size": 8, "paper": "pub",
          "images": {"size": 32, "crop": "top-left", "resample": "area", "decoder": "opencv"}}  # toy images enlarged
# a transformers dual encoder from a model directory (save_pretrained: weights and processor)
HF_CLIP = {"source": "images", "adapter": "hf_dual", "path": "models/tiny-clip", "batch_size": 4}
# the joint spaces of docs/joint-spaces.md, random, each with its processor directory
# (vlbias.models.hf_dual.write_processor): in the sweep (FLAVA's in the cross-modal table too, by its sweep
# name) and BLIP's ITC in SEAT
JOINT = {a: {"adapter": "hf_dual", "architecture": a, "weights": "random", "config": TINY_DUAL[a],
             "processor": f"models/tiny-{a}-processor", "batch_size": 4} for a in ("siglip2", "blip", "flava")}
WORDS = {"A": ["joy", "love", "peace"], "B": ["pain", "hate", "war"]}


def vectors_csv(path, ids, seed=0, dim=5):
    vectors = np.random.default_rng(seed).normal(size=(len(ids), dim))
    pd.DataFrame(vectors, columns=[f"d{i}" for i in range(dim)]).assign(id=ids)[
        ["id", *(f"d{i}" for i in range(dim))]].to_csv(path, index=False)
    return dict(zip(ids, vectors))


def make(root):
    config = make_project(root)
    ieat, stimuli = config["ieat"], root / "resources/stimuli/ieat"
    write_yaml(stimuli / "flower-insect-text-attributes.yaml", {
        "id": "flower-insect-text-attributes", "name": "Flower-Insect (text attributes)", "suite": "ieat",
        "level": "cross-modal", "X": {"label": "flower", "category": "toy/flower"},
        "Y": {"label": "insect", "category": "toy/insect"},
        **{s: {"label": s, "items": words} for s, words in WORDS.items()}})
    # the SEAT tests of the project are "published" (a paper's family); one's own test beside them is not
    seat_dir = root / "resources/stimuli/seat"
    for name in ("weat-toy", "sent-toy"):
        write_yaml(seat_dir / f"{name}.yaml", {**yaml.safe_load((seat_dir / f"{name}.yaml").read_text()),
                                                "family": "paper2019"})
    write_yaml(seat_dir / "own-toy.yaml", {
        "id": "own-toy", "name": "Own toy", "suite": "seat", "level": "word",
        **{s: {"label": s, "items": w} for s, w in zip("XYAB", (["rose", "tulip"], ["ant", "wasp"], ["joy", "love"], ["pain", "hate"]))}})
    images = [f"{c}/{f}" for c, f in (line.split("\t")[:2] for line in
                                      (root / "resources/manifests/images.tsv").read_text().splitlines()[1:])]
    seat_words = sorted({w for p in (root / "resources/stimuli/seat").glob("*.yaml")
                         for s in "XYAB" for w in yaml.safe_load(p.read_text())[s]["items"]})
    mine = vectors_csv(root / "mine.csv", images + WORDS["A"] + WORDS["B"])
    vectors_csv(root / "mine-seat.csv", seat_words, seed=1, dim=4)
    # vectors of one test's words only: the model runs that test alone (its entry's `tests`)
    weat_words = sorted({w for s in "XYAB" for w in yaml.safe_load((seat_dir / "weat-toy.yaml").read_text())[s]["items"]})
    vectors_csv(root / "weat-only.csv", weat_words, seed=2, dim=4)
    ieat["models"] |= copy.deepcopy({"tiny-clip": CLIP, "hf-clip": HF_CLIP, "tiny-igpt": IGPT, "tiny-simclr": SIMCLR,
                                     "mine": {"source": "vectors", "vectors": "mine.csv", "model_id": "my vectors",
                                              "dim": 5}})
    ieat["tables"] = {
        "table1": {"caption": "toy Table 1", "models": ["pub", "tiny-igpt/layer1", "tiny-simclr", "tiny-clip", "hf-clip",
                                                      "mine"],
                   "tests": ["flower-insect", "insect-flower"]},
        "table2": {"caption": "toy Table 2", "models": ["pub", "tiny-igpt/layer0"], "tests": ["flower-insect"]},
        "table3": {"caption": "toy Table 3", "models": ["pub", "tiny-igpt/logits"], "tests": ["flower-insect"]},
        "cross": {"caption": "cross-modal", "models": ["tiny-clip", "hf-clip", "flava-random0", "mine"],
                  "tests": ["flower-insect-text-attributes"]},
    }
    ieat["sweep"] = {"caption": "toy sweep", "tests": "all",
                     "models": copy.deepcopy([{k: v for k, v in CLIP.items() if k != "source"}, *JOINT.values()])}
    config["seat"]["models"] = {"mine": {"source": "vectors", "vectors": "mine-seat.csv", "model_id": "my words"},
                                "weat-only": {"source": "vectors", "vectors": "weat-only.csv", "tests": ["weat-toy"]},
                                "hf-clip": {k: v for k, v in HF_CLIP.items() if k != "source"},
                                "hf-blip": copy.deepcopy(JOINT["blip"])}
    (root / "resources/published.tsv").write_text("table\ttest\tmodel\tn_t\tn_a\td\tp\tiat_d\n"
                                                  "table1\tflower-insect\tpub\t5\t4\t1.00\t0.01\t\n"
                                                  "table3\tflower-insect\tpub\t5\t4\t0.50\t0.10\t\n")
    write_yaml(root / "config/config.yaml", config)
    return config, mine


# the ML-EAT files the fixture builds: Table 1's and the sweep's (the default target's are off: stats/mleat/build)
MLEAT = ["results/ieat/mleat/table1.csv", "results/ieat/mleat/sweep.csv"]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("ieat-project")
    config, mine = make(root)
    config["stats"]["mleat"] = {"build": False}
    config["ieat"]["specificity"]["models"] = []  # no specificity check: tests/workflow/test_workflow.py's
    write_yaml(root / "config/config.yaml", config)
    # the transformers models' files (dry runs need none)
    tiny_dual_dir(root / HF_CLIP["path"], "clip")
    for architecture, entry in JOINT.items():
        write_processor(root / entry["processor"], architecture, 32, TINY_DUAL_CONTEXT[architecture])
    snakemake(root, "all", *MLEAT)
    return root, mine


def table(root, name):
    return pd.read_csv(root / f"results/ieat/{name}.csv", keep_default_na=False, dtype={"d_paper": str})


def test_tables_1_to_3_put_the_recomputed_models_beside_the_published(project):
    root, _ = project
    t1, t2, t3 = (table(root, t) for t in ("table1", "table2", "table3"))
    assert list(t1["model"]) == ["pub", "tiny-igpt/layer1", "tiny-simclr", "tiny-clip", "hf-clip", "mine"] * 2
    assert list(t2["model"]) == ["pub", "tiny-igpt/layer0"] and list(t3["model"]) == ["pub", "tiny-igpt/logits"]
    for t in (t1, t2, t3):
        assert (t["status"] == "ok").all() and t["d"].astype(float).abs().le(2).all()
    # the image models lost the missing and the corrupt image, as the image store's manifest says
    igpt = t1[(t1["model"] == "tiny-igpt/layer1") & (t1["test"] == "flower-insect")].iloc[0]
    assert (igpt.n_x, igpt.n_y, igpt.n_a, igpt.n_b) == (5, 5, 4, 4) and igpt.weights == "random-init"
    # the paper's printed numbers beside the published column and the recomputed columns reproducing it
    first = t1[t1["test"] == "flower-insect"].set_index("model")["d_paper"]
    assert first.to_dict() == {"pub": "1.00", "tiny-igpt/layer1": "1.00", "tiny-simclr": "1.00", "tiny-clip": "",
                               "hf-clip": "", "mine": ""}
    assert t3.set_index("model")["d_paper"].to_dict() == {"pub": "0.50", "tiny-igpt/logits": "0.50"}
    assert "| Flower-Insect | tiny-igpt/layer1 |" in (root / "results/ieat/table1.md").read_text()


def test_each_model_reads_its_own_image_store_built_once(project):
    root, _ = project
    stores = sorted(p.parent.name for p in (root / "results/images/ieat").glob("*/images.h5"))
    assert stores == ["32px-center-bicubic-pil", "32px-top-left-area-opencv", "8px-top-left-area-opencv"]
    # one job per store: the open_clip models of the table and of the sweep shared theirs
    assert len(list((root / "results/logs/ieat_images").iterdir())) == 3
    import h5py

    with h5py.File(root / "results/images/ieat/8px-top-left-area-opencv/images.h5", "r") as f:
        assert f["toy/flower/pixels"].shape == (5, 8, 8, 3) and f.attrs["resample"] == "area"
    # every store's manifest says which decoder produced it
    for name, decoder in [("32px-center-bicubic-pil", "pil"), ("32px-top-left-area-opencv", "opencv")]:
        status = read_manifest(root / "results/images/ieat" / name / "manifest.tsv")
        assert status and {r["decoder"] for r in status} == {decoder}
    assert "tiny-igpt/layer1" in (root / "results/ieat/table1.missing.tsv").read_text()


def test_several_igpt_outputs_come_from_one_job(project):
    root, _ = project
    logs = sorted(p.name for p in (root / "results/logs/ieat_embed_images").iterdir())
    assert "tiny-igpt.log" in logs and not any(name.startswith("tiny-igpt/") for name in logs)
    dims = {o: read_set(root / f"results/embeddings/ieat/tiny-igpt/{o}.h5", "toy/flower")[0].shape
            for o in ("layer0", "layer1", "logits")}
    assert dims == {"layer0": (5, 16), "layer1": (5, 16), "logits": (5, 16)}
    prov = read_provenance(root / "results/embeddings/ieat/tiny-igpt/logits.h5")
    assert prov["output"] == "logits" and prov["model_id"] == "tiny random iGPT"


def test_own_vectors_give_the_statistics_of_the_file(project):
    root, mine = project
    t1 = table(root, "table1")
    row = t1[(t1["model"] == "mine") & (t1["test"] == "flower-insect")].iloc[0]
    X, Y, A, B = ([mine[f"toy/{c}/img{i}.png"] for i in range(n)]
                  for c, n in [("flower", 5), ("insect", 5), ("pleasant", 4), ("unpleasant", 4)])
    assert row.weights == "user vectors" and row.model_id == "my vectors"
    # the manifest's missing and corrupt images have vectors in the file: the user's vectors use them
    assert (row.n_a, row.n_b) == (5, 5)
    A.append(mine["toy/pleasant/gone.jpg"])
    B.append(mine["toy/unpleasant/page.jpg"])
    assert float(row.d) == pytest.approx(effect_size(np.array(X), np.array(Y), np.array(A), np.array(B)))
    prov = read_provenance(root / "results/embeddings/ieat/mine.h5")
    assert prov["vectors_file"] == "mine.csv" and len(prov["vectors_sha256"]) == 64
    for model in ("mine", "hf-clip", "hf-blip"):  # a user's vectors, a transformers CLIP's and BLIP ITC's text towers
        seat = pd.read_csv(root / f"results/seat/{model}/table.csv")
        assert set(seat["test"]) == {"weat-toy", "sent-toy", "own-toy"} and (seat["status"] == "ok").all()


def test_own_tests_are_their_own_family_and_a_model_runs_the_tests_it_names(project):
    """One's own stimulus file beside a paper's tests never shifts their adjusted p; a model
    entry's `tests` runs those alone (vectors of one test's words suffice)."""
    root, _ = project
    seat = pd.read_csv(root / "results/seat/mine/table.csv").set_index("test")
    assert seat.loc["own-toy", "family"] == "own" and seat.loc["weat-toy", "family"] == "paper2019"
    assert seat.loc["own-toy", "p_holm"] == seat.loc["own-toy", "p"]  # a family of one
    published = seat.loc[["sent-toy", "weat-toy"]]
    assert published["p_holm"].tolist() == pytest.approx(list(holm(published["p"].to_numpy())))
    only = pd.read_csv(root / "results/seat/weat-only/table.csv")
    assert only["test"].tolist() == ["weat-toy"] and (only["status"] == "ok").all()


def test_a_cross_modal_test_on_clip_and_on_own_vectors(project):
    root, _ = project
    cross = table(root, "cross").set_index("model")
    assert (cross["status"] == "ok").all() and (cross["n_a"].astype(int) == 3).all()
    for model, dim in (("tiny-clip", 16), ("hf-clip", 8), ("flava-random0", 8)):
        vectors, ids = read_set(root / f"results/embeddings/ieat/{model}.h5", "flower-insect-text-attributes/A")
        assert list(ids) == WORDS["A"] and vectors.shape == (3, dim)
    flava = read_provenance(root / "results/embeddings/ieat/flava-random0.h5")
    assert (flava["architecture"], flava["weights"]) == ("FlavaModel", "random-init") and "[CLS]" in flava["pooling"]
    prov = read_provenance(root / "results/embeddings/ieat/hf-clip.h5")
    assert (prov["adapter"], prov["architecture"], prov["weights"]) == ("hf_dual", "CLIPModel", "pretrained")
    assert len(prov["weights_sha256"]) == 64 and prov["padding"] == "longest"


def test_the_sweep_writes_one_table_and_a_heatmap(project):
    root, _ = project
    sweep = table(root, "sweep")
    tests = sorted(p.stem for p in (root / "resources/stimuli/ieat").glob("*.yaml"))
    assert sorted(set(sweep["test"])) == tests
    # an open_clip model and the transformers joint spaces (hf_dual) side by side
    models = ["tiny-vit-random0", "siglip2-random0", "blip-random0", "flava-random0"]
    assert list(dict.fromkeys(sweep["model"])) == models
    assert (sweep["status"] == "ok").all() and len(sweep) == len(models) * len(tests)
    md = (root / "results/ieat/sweep.md").read_text()
    assert f"| test | {' | '.join(models)} |" in md and "Flower-Insect (text attributes)" in md
    assert (root / "results/ieat/sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # its ML-EAT beside it (docs/mleat.md): every (test, model), the cross-modal test in the joint spaces too,
    # Level 1 the sweep's d and p, an EAT-Map each
    mleat = pd.read_csv(root / "results/ieat/mleat/sweep.csv", keep_default_na=False)
    assert [(r.test, r.model) for r in mleat.itertuples()] == [(r.test, r.model) for r in sweep.itertuples()]
    assert mleat["l1_d"].tolist() == sweep["d"].tolist() and mleat["l1_p"].tolist() == sweep["p"].tolist()
    assert (mleat["status"] == "ok").all() and set(mleat["pattern"]) <= {*(c for c, _ in PATTERNS.values())}
    assert (root / "results/ieat/mleat/sweep/flower-insect-text-attributes/siglip2-random0.png").is_file()
    # Table 1's: every kind of model, iGPT's layer by its table name
    table1 = pd.read_csv(root / "results/ieat/mleat/table1.csv", keep_default_na=False)
    assert list(dict.fromkeys(table1["model"])) == list(dict.fromkeys(table(root, "table1")["model"]))
    assert (table1["status"] == "ok").all()
    assert map_path(root / "results/ieat/mleat/table1", "flower-insect", "tiny-igpt/layer1").is_file()


def test_a_second_run_does_nothing(project):
    root, _ = project
    assert planned_jobs(root) == {}


@pytest.mark.parametrize("change,message", [
    (lambda c: c["ieat"]["tables"]["cross"]["models"].append("pub"),
     "flower-insect-text-attributes.yaml: sets A, B are texts, and model 'pub' (published vectors) embeds no texts"),
    (lambda c: c["ieat"]["tables"]["cross"]["models"].append("tiny-simclr"),
     "model 'tiny-simclr' (adapter simclr) embeds no texts"),
    (lambda c: c["ieat"]["tables"]["table2"]["models"].append("tiny-igpt"),
     "key 'ieat/tables/table2/models/2': 'tiny-igpt' has several outputs; name one of tiny-igpt/layer0, "
     "tiny-igpt/layer1, tiny-igpt/logits"),
    (lambda c: c["ieat"]["models"]["tiny-igpt"].update(paper={"layer2": "pub"}),
     "key 'ieat/models/tiny-igpt/paper': layer2: not an output of 'tiny-igpt' (it has: layer0, layer1, logits)"),
    (lambda c: c["ieat"]["models"]["mine"].pop("vectors"), "key 'ieat/models/mine': 'vectors' is a required property"),
    (lambda c: c["ieat"]["sweep"]["models"].append(copy.deepcopy(c["ieat"]["sweep"]["models"][0])),
     "key 'ieat/sweep/models/4': its name 'tiny-vit-random0' is taken by 'ieat/sweep/models/0' (set `name`)"),
    (lambda c: c["ieat"]["sweep"]["models"][0].update(pretraind="openai"),
     "key 'ieat/sweep/models/0/pretraind': unknown key (did you mean 'pretrained'?)"),
    (lambda c: c["ieat"]["models"]["tiny-clip"].update(images={"size": 32, "crop": "top"}),
     "key 'ieat/models/tiny-clip/images/crop': 'top' is not one of ['center', 'top-left']"),
])
def test_mistakes_are_named_before_any_job_runs(tmp_path, change, message):
    config, _ = make(tmp_path)
    change(config)
    write_yaml(tmp_path / "config/config.yaml", config)
    proc = snakemake(tmp_path, "--dry-run", check=False)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert 'File "' not in proc.stderr and "ConfigError in" not in proc.stderr  # no traceback: the problem only


def test_a_stimulus_missing_from_own_vectors_fails_naming_the_file_and_id(tmp_path):
    make(tmp_path)
    lines = (tmp_path / "mine.csv").read_text().splitlines()
    (tmp_path / "mine.csv").write_text("\n".join(l for l in lines if not l.startswith("toy/insect/img3.png")) + "\n")
    proc = snakemake(tmp_path, "results/embeddings/ieat/mine.h5", check=False)
    assert proc.returncode != 0
    assert "mine.csv: no vector for 1 stimulus id(s) of set 'toy/insect': 'toy/insect/img3.png'" in proc.stderr
    assert not (tmp_path / "results/embeddings/ieat/mine.h5").exists()


def test_row_7_a_job_failing_on_a_users_file_says_so_in_one_line(tmp_path, monkeypatch):
    # row 7: the one-line error, then two chained Python tracebacks; the traceback is in the job's log
    make(tmp_path)
    with open(tmp_path / "mine.csv", "a") as f:
        f.write("joy,1,2,3,4,5\n")
    proc = snakemake(tmp_path, "results/embeddings/ieat/mine.h5", check=False)
    assert proc.returncode != 0
    said = [line for line in proc.stderr.splitlines() if "given twice" in line]
    assert len(said) == 1 and said[0].endswith("vlbias ERROR mine.csv: id 'joy' is given twice (line 22 and line 28)")
    assert "Traceback" not in proc.stderr, proc.stderr
    log = (tmp_path / "results/logs/ieat_vectors/mine.log").read_text()
    assert "Traceback" in log and "raise InputError" in log  # kept for whoever debugs
    monkeypatch.setenv("VLBIAS_DEBUG", "1")
    debug = snakemake(tmp_path, "results/embeddings/ieat/mine.h5", check=False)
    assert "Traceback" in debug.stderr and "raise InputError" in debug.stderr
