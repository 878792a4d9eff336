"""Association tests on models' embedding stores → result rows with provenance.

A table's tests on its models run in one process (``run_tests``): the statistics of a whole table
take about a second, less than starting a process per test would.
"""

import json
import logging
import math
from pathlib import Path

import numpy as np

from vlbias.errors import InputError
from vlbias.io.atomic import atomic_path
from vlbias.io.store import read_provenance, read_set
from vlbias.logs import Progress
from vlbias.stats import effect_size_sw, permutation_test_sw, s_wAB
from vlbias.stats.bootstrap import cosines, effect_size_ci_cos
from vlbias.stats.mleat import Level1, mleat, p_normal
from vlbias.stats.row import ASSOCIATION, IDENTITY, MLEAT, PROVENANCE, SETS, SIZES

log = logging.getLogger(__name__)


def _load(stimulus, store_path, model):
    """(the row's identity, provenance and n per set, {set: vectors}, a skip status or None) of
    ``stimulus`` on the store: the one reading of a test's vectors both tests' runners share."""
    prov = read_provenance(store_path)
    row = {
        "test": stimulus.id, "name": stimulus.name, "family": stimulus.family, "model": model,
        **{s: st.label for s, st in stimulus.sets.items()},
        "model_id": prov.get("model_id", ""), "revision": prov.get("revision", ""),
        "weights": prov.get("weights", ""),
    }
    vectors = {}
    for s, st in stimulus.sets.items():
        vectors[s], _ = read_set(store_path, st.key)
    row.update({n: len(vectors[s]) for n, s in zip(SIZES, SETS)})
    empty = [f"{s} ({st.key})" for s, st in stimulus.sets.items() if len(vectors[s]) == 0]
    return row, vectors, f"skipped: no stimuli left in {', '.join(empty)}" if empty else None


def run_test(stimulus, store_path, model, *, n_samples, seed, exact="auto", threads=None, ci=None):
    """Effect size and permutation p of ``stimulus`` on the vectors in ``store_path``.

    ``ci``: settings of the bootstrap confidence interval of d ({level, n_boot, seed, method}, see
    vlbias.stats.bootstrap.effect_size_ci_cos), or None for none.

    A set with no vectors (every image of a category failed to arrive) gives a row with
    status "skipped: ..." and no numbers; malformed vectors (NaN, zero, mismatched
    dimensions) raise InputError naming the stimulus file and the store.
    """
    row, vectors, skipped = _load(stimulus, store_path, model)
    if skipped:
        return ASSOCIATION.build(row, status=skipped)
    return score(row, vectors, f"{stimulus.path} on {store_path}", n_samples=n_samples, seed=seed, exact=exact,
                 threads=threads, ci=ci)


def score(row, vectors, where, *, n_samples, seed, exact="auto", threads=None, ci=None, declared=ASSOCIATION):
    """``row`` (a test's identity and provenance) with the d, p and interval of ``vectors`` ({X|Y|A|B:
    (n, dim)}, none empty) and its status: what ``run_test`` computes once it has read the store, and
    vlbias.robustness on each specification's vectors. ``declared``: the row's declaration
    (vlbias.stats.row; a table with columns of its own declares them beside ASSOCIATION's). A ValueError
    of the vectors raises InputError naming ``where``."""
    # d divides by the deviation over X and Y together: with one stimulus on each side it is ±√2 whatever
    # the vectors, and a target set of one has no spread of its own; no d, no p (the row says why)
    few = [f"{s} has {len(vectors[s])}" for s in ("X", "Y") if len(vectors[s]) < 2]
    if few:
        return declared.build(row, status=f"too-few: {' and '.join(few)} stimulus; d and p need at least 2 in each "
                                          "target set")
    try:
        s_xy = s_wAB(_stack(vectors["X"], vectors["Y"]), vectors["A"], vectors["B"])
        n_x = len(vectors["X"])
        d = effect_size_sw(s_xy[:n_x], s_xy[n_x:])
        res = permutation_test_sw(s_xy, n_x, n_samples=n_samples, seed=seed, exact=exact, threads=threads)
    except ValueError as e:
        raise InputError(where, str(e)) from None
    if ci is not None:  # the vectors passed the checks above
        X, Y, A, B = (vectors[s] for s in ("X", "Y", "A", "B"))
        interval = effect_size_ci_cos(cosines(X, Y, A, B), (len(X), len(Y), len(A), len(B)), d, **ci)
        row = {**row, "d_low": interval.low, "d_high": interval.high, "ci_level": interval.level,
                "ci_method": interval.method, "ci_n_boot": interval.n_boot, "ci_seed": interval.seed}
    return declared.build(
        row, d=d, p=res.p, p_se=res.p_se, p_parametric=res.p_parametric, n_samples=res.n_samples, exact=res.exact,
        n_partitions=partitions_text(res.n_partitions), seed="" if res.seed is None else res.seed, status="ok",
    )


def run_tests(stimuli, stores, *, n_samples, seed, exact="auto", threads=None, ci=None):
    """Rows of every test of ``stimuli`` on every model of ``stores`` ({model: store path}), test by
    test in order, each test's models in the order of ``stores`` (``ci``: see ``run_test``)."""
    progress = Progress(len(stimuli) * len(stores), "tests", log)
    rows = []
    for stimulus in stimuli:
        for model, path in stores.items():
            rows.append(run_test(stimulus, path, model, n_samples=n_samples, seed=seed, exact=exact,
                                 threads=threads, ci=ci))
            progress.advance()
    progress.done()
    return rows


def write_rows(rows, path, *, n_samples, seed, exact="auto", ci=None):
    """A table job's rows (``run_tests``') and the settings that computed them, as JSON at ``path``: its
    floats in full (the CSV rounds them), so the table's ML-EAT job takes Level 1 from them bit for bit
    (``table_level1``) instead of computing it again."""
    doc = {"settings": {"n_samples": n_samples, "seed": seed, "exact": exact, "ci": ci}, "rows": rows}
    with atomic_path(path) as tmp:
        # numpy scalars (a kernel's bool) as the Python values they hold
        Path(tmp).write_text(json.dumps(doc, default=lambda v: v.item()), encoding="utf-8")


def table_level1(path, *, n_samples, seed, exact="auto", ci=None):
    """{(test, model): Level1} of the rows in a ``write_rows`` file that have d and p: what
    vlbias.stats.mleat.level1 computes for the same vectors and settings. {} when the file's settings
    are not these (its d, p and interval would not be this ML-EAT's)."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if doc["settings"] != {"n_samples": n_samples, "seed": seed, "exact": exact, "ci": ci}:
        log.info("%s: computed with other settings (%s); Level 1 computed anew", path, doc["settings"])
        return {}
    # a count too large to write in full ("≈...") is not the exact int Level 1 holds: computed anew
    return {(r["test"], r["model"]): _level1(r) for r in doc["rows"]
            if r["status"] == "ok" and r["n_partitions"].isdigit()}


def _level1(row):
    """The Level1 of a table's row (``score``'s), as vlbias.stats.mleat.level1 builds it from the same numbers."""
    return Level1(row["d"], row["p"], row["p_se"], p_normal(row["p_parametric"]), row["exact"], row["n_samples"],
                  int(row["n_partitions"]), None if row["seed"] == "" else row["seed"], row.get("d_low", np.nan),
                  row.get("d_high", np.nan))


def run_mleat(stimulus, store_path, model, *, n_samples, seed, exact="auto", threads=None, ci=None, alpha, null,
              saturation, l1=None):
    """The ML-EAT (vlbias.stats.mleat) of ``stimulus`` on the vectors in ``store_path``, read as
    ``run_test`` reads them (so its Level 1 is the table's d and p): (row, MLEATResult or None).
    ``l1``: its Level 1 as the table's job computed it (``table_level1``), or None to compute it.

    The row (vlbias.stats.row.MLEAT) is the test's identity, the model's provenance and
    MLEATResult.row(); a set with no vectors gives a row with the skip status and no result.
    Malformed vectors raise InputError naming the stimulus file and the store.
    """
    row, vectors, skipped = _load(stimulus, store_path, model)
    shared = {k: row[k] for k in (*IDENTITY, *SIZES, *PROVENANCE)}
    if skipped:
        return MLEAT.build(shared, status=skipped), None
    try:
        r = mleat(*(vectors[s] for s in ("X", "Y", "A", "B")), n_samples=n_samples, seed=seed, exact=exact,
                  threads=threads, ci=ci, alpha=alpha, null=null, saturation=saturation, l1=l1)
    except ValueError as e:
        raise InputError(f"{stimulus.path} on {store_path}", str(e)) from None
    return MLEAT.build(shared, r.row()), r


def run_mleats(stimuli, stores, computed=None, **settings):
    """[(row, MLEATResult or None)] of every test of ``stimuli`` on every model of ``stores``, in
    ``run_tests``' order (``settings``: those of ``run_mleat``); ``computed``: {(test, model): Level1}
    the table's job computed (``table_level1``), each taken instead of computing it."""
    computed = computed or {}
    progress = Progress(len(stimuli) * len(stores), "ML-EATs", log)
    found = []
    for stimulus in stimuli:
        for model, path in stores.items():
            found.append(run_mleat(stimulus, path, model, l1=computed.get((stimulus.id, model)), **settings))
            progress.advance()
    progress.done()
    return found


def partitions_text(n):
    """The number of partitions as the tables write it: all its digits, or, beyond what Python writes
    of an int as text (|X| + |Y| >= 14,292 passes its 4,300 digits), "≈<mantissa>e+<exponent>"."""
    if n.bit_length() <= 14_000:  # 10^4214: within the limit
        return str(n)
    exponent = math.floor(math.log10(n))
    return f"≈{10 ** (math.log10(n) - exponent):.6f}e+{exponent}"


def _stack(X, Y):
    if X.shape[1:] != Y.shape[1:]:
        raise ValueError(f"set Y: dimension {Y.shape[1]} does not match {X.shape[1]} of set X")
    return np.concatenate([X, Y])
