"""The rows of the grounded experiments on an embedding file (vlbias.suites.grounded.jobs.run_experiments):
sets the statistics cannot use give a row whose status says why, and no numbers."""

import hashlib
import json

import numpy as np
import pytest

from helpers.grounded import write_grounded

from vlbias.stats.row import GROUNDED_PROVENANCE
from vlbias.suites.grounded.jobs import run_experiments, store_attrs

SIZES = {"X": 3, "Y": 3, "A_x": 2, "A_y": 2, "B_x": 2, "B_y": 2}


def sets(**sizes):
    rng = np.random.default_rng(0)
    return {role: rng.normal(size=(n, 6)) for role, n in (SIZES | sizes).items()}


def rows(tmp_path, **sizes):
    return run_experiments(write_grounded(tmp_path / "e.h5", sets(**sizes)), n_samples=50, seed=0, exact="auto")


def test_every_experiment_runs_on_target_sets_of_two(tmp_path):
    found = rows(tmp_path, X=2, Y=2)
    assert [r["experiment"] for r in found] == ["1", "2", "3"]
    assert all(r["status"] == "ok" and np.isfinite(r["d"]) for r in found)


@pytest.mark.parametrize("sizes, says", [({"X": 1}, "too-few: X has 1 pair"),
                                         ({"X": 1, "Y": 1}, "too-few: X has 1 and Y has 1 pair"),
                                         ({"Y": 1}, "too-few: Y has 1 pair")])
def test_a_target_set_of_one_pair_gives_no_d_and_no_p(tmp_path, sizes, says):
    # with one target on each side d is ±√2 whatever the vectors: a number that means nothing
    for row in rows(tmp_path, **sizes):
        assert row["status"].startswith(says), row["status"]
        assert "d" not in row and "p" not in row
        assert (row["n_x"], row["n_y"]) == ((SIZES | sizes)["X"], (SIZES | sizes)["Y"])


def test_an_attribute_set_of_one_pair_is_enough(tmp_path):
    assert all(r["status"] == "ok" for r in rows(tmp_path, A_x=1, B_y=1))


def test_an_emptied_set_is_named(tmp_path):
    assert {r["status"] for r in rows(tmp_path, B_x=0)} == {"skipped: no pairs left in B_x"}


def test_an_embedding_store_carries_every_column_its_rows_take_from_it(tmp_path):
    regions = tmp_path / "regions.h5"
    regions.write_bytes(b"regions")
    info = {"model_id": "unc-nlp/lxmert-base-uncased", "revision": None, "commit": "c0ffee", "weights": "hub",
            "weights_sha256": None}
    record = {"entry": "grounded/lxmert", "request": None, "sources": {}}
    attrs = store_attrs(("paper", "google", "lxmert"), "LXMERT", {"seed": 1, "image_mask": "persons"}, info, record,
                        "frcnn", regions, b"bua")
    assert {"protocol", "dataset", "model", "column", *GROUNDED_PROVENANCE} <= set(attrs)
    assert (attrs["revision"], attrs["weights_sha256"], attrs["commit"]) == ("", "", "c0ffee")  # None: ""
    assert attrs["switches"] == '{"image_mask": "persons", "seed": 1}' and attrs["region_weights"] == "b'bua'"
    assert attrs["region_store_sha256"] == hashlib.sha256(b"regions").hexdigest()
    assert json.loads(attrs["weights_record"]) == record
