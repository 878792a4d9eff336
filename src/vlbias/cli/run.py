"""vlbias run: one association test on one model, a row of the workflow's tables.

The workflow's engine (vlbias.associate.run_test) and settings (the config's ``stats``, the flags
over them, the schema's defaults where neither says), and the columns of the workflow's tables
(vlbias.report.tables.TABLE_COLUMNS). The vectors: a model of the config (text stimuli encoded
here by its adapter, image stimuli read from the store the workflow built), an embedding store, or
one's own vectors.
"""

import logging
import tempfile
from pathlib import Path

from vlbias import CONFIG
from vlbias.cli.common import UsageError, load_config, schema_default, write
from vlbias.errors import InputError

CI_KEYS = ("level", "n_boot", "seed", "method")

log = logging.getLogger(__name__)


def add_parser(sub):
    p = sub.add_parser("run", help="one association test on one model: a row of the workflow's tables",
                       description="Effect size d and permutation p (and, with --ci or stats: ci in the "
                                   "config, d's bootstrap interval) of one stimulus file on one model.")
    p.add_argument("stimulus", help="a stimulus file (resources/stimuli/<suite>/<id>.yaml or your own)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="a model entry of the config (text stimuli are encoded by its adapter; "
                                       "image stimuli read the workflow's store of the model)")
    which.add_argument("--store", help="an embedding store (HDF5, vlbias.io.store) holding the stimulus's sets")
    which.add_argument("--vectors", help="your own vectors, one per stimulus id (CSV, NPY with --ids, HDF5; "
                                         "see vlbias.io.vectors)")
    p.add_argument("--ids", help="with --vectors of an .npy file: its ids, one per line in row order")
    p.add_argument("--dim", type=int, help="with --vectors: the dimension every vector must have")
    p.add_argument("--manifest", help="with --vectors and image sets: an image manifest (TSV: category, file) "
                                      "whose every image must have a vector (default: the file's own ids)")
    p.add_argument("--name", help="the model's name in the row (with --store or --vectors; default: the file's stem)")
    p.add_argument("--config", help=f"the workflow config: its stats settings, its models (default {CONFIG})")
    stats = lambda key: schema_default("stats", key)  # noqa: E731
    ci = lambda key: schema_default("stats", "ci", key)  # noqa: E731
    p.add_argument("--n-samples", type=int,
                   help=f"permutation partitions (default: the config's, else {stats('n_samples')})")
    p.add_argument("--exact", choices=["auto", "true", "false"],
                   help=f"enumerate all partitions (default: the config's, else {stats('exact')})")
    p.add_argument("--seed", type=int, help=f"seed of the sampled partitions (default: the config's, else {stats('seed')})")
    interval = p.add_mutually_exclusive_group()
    interval.add_argument("--ci", action="store_true", help="add d's bootstrap confidence interval")
    interval.add_argument("--no-ci", action="store_true", help="no interval, whatever the config says")
    p.add_argument("--ci-level", type=float, help=f"the interval's level ({ci('level')})")
    p.add_argument("--ci-n-boot", type=int, help=f"bootstrap replicates ({ci('n_boot')})")
    p.add_argument("--ci-seed", type=int, help=f"the bootstrap's seed ({ci('seed')})")
    p.add_argument("--ci-method", choices=["bca", "percentile"], help=f"the interval ({ci('method')})")
    p.add_argument("--format", choices=["csv", "md", "json"], default="csv", help="output format (csv)")
    p.add_argument("-o", "--output", help="write here instead of the standard output")
    p.set_defaults(func=main)


def main(args):
    # the first line before the imports and the config (seconds on a busy machine)
    log.info("%s on %s", args.stimulus, args.model or args.store or args.vectors)
    import h5py

    from vlbias.associate import run_test
    from vlbias.io.stimuli import load_stimulus
    from vlbias.report.tables import assemble

    from vlbias.suites.registry import check_suite

    stimulus = load_stimulus(args.stimulus)
    check_suite(stimulus)
    config = load_config(args.config or CONFIG) if args.model or args.config else None
    settings = settings_of(args, config)
    ci = settings.pop("ci")
    with tempfile.TemporaryDirectory() as tmp:
        if args.store:
            store, model = Path(args.store), args.name or Path(args.store).stem
            if not store.is_file():
                raise UsageError(f"{store}: no such embedding store")
            if not h5py.is_hdf5(store):
                raise InputError(store, "not an HDF5 file: an embedding store is one (vlbias.io.store); "
                                        "for your own vectors use --vectors")
        elif args.vectors:
            store, model = vectors_store(args, stimulus, tmp), args.name or Path(args.vectors).stem
        else:
            from vlbias.api import find_model

            suite, spec = find_model(config, args.model, stimulus.suite)
            log.info("%s/%s: encoding %s (the model built if the cache lacks a text)", suite, args.model, stimulus.id)
            store, model = model_store(config, suite, args.model, spec, stimulus, tmp), args.model
        log.info("%s on %s: d and p%s", stimulus.id, model, " and d's interval" if ci else "")
        row = run_test(stimulus, store, model, ci=ci, **settings)
    table = assemble([row], [stimulus.id], [model])
    if args.format == "csv":
        text = table.to_csv(index=False)
    elif args.format == "json":
        text = table.to_json(orient="records", indent=2) + "\n"
    else:
        from vlbias.report.tables import to_markdown

        text = to_markdown(table, f"{stimulus.name} on {model}")
    write(text, args.output)
    return 0 if row["status"] == "ok" else 1


def settings_of(args, config):
    """The test's settings (vlbias.api.settings): the config's ``stats``, the flags over them, the
    schema's defaults where neither says."""
    from vlbias.api import settings

    exact = {"true": True, "false": False}.get(args.exact, args.exact)
    flags = {key: getattr(args, f"ci_{key}") for key in CI_KEYS if getattr(args, f"ci_{key}") is not None}
    ci = False if args.no_ci else flags if args.ci or flags else None
    try:
        return settings(config, n_samples=args.n_samples, exact=exact, seed=args.seed, ci=ci)
    except UsageError as e:  # the flags' values, with the config's limits (a config's own were checked when loaded)
        raise UsageError(f"{e} (--n-samples, --seed, --ci-* set these keys)") from None


def model_store(config, suite, name, spec, stimulus, workdir):
    """The embedding store holding ``stimulus``'s vectors on model ``name`` of ``suite``: text stimuli
    encoded here as the workflow's jobs encode them (vlbias.api.model_store: weights fetched, locked and
    verified, the content-keyed cache); image categories come from the store the workflow builds for the
    model (results/embeddings/<suite>/<name>.h5)."""
    if all(s.items is not None for s in stimulus.sets.values()):
        from vlbias.api import model_store

        store = Path(workdir) / f"{name}.h5"
        model_store([stimulus], suite, name, spec, config, config["cache"], store)
        return store
    from vlbias.suites.plan import embedding_path

    store = Path(embedding_path(suite, name))
    if not store.is_file():
        raise UsageError(f"{stimulus.path} has image sets: their vectors on '{name}' come from the workflow's "
                         f"store {store}, not built yet (snakemake --cores all {store})")
    return store


def vectors_store(args, stimulus, workdir):
    """An embedding store of ``stimulus``'s sets from the user's vectors file (vlbias.io.vectors): text
    items keyed by their text, images by "<category>/<file>": each file the image manifest lists for
    the category (--manifest), else each the vectors file has under it."""
    from vlbias.io.vectors import read_vectors, stimulus_sets, vectors_store
    from vlbias.suites.stores import image_files

    vectors = read_vectors(args.vectors, ids=args.ids, dim=args.dim)
    if args.manifest:
        images = image_files(args.manifest)
    else:
        images = {}
        for i in sorted(vectors.ids):
            if "/" in i:
                category, file = i.rsplit("/", 1)
                images.setdefault(category, []).append(file)
    store = Path(workdir) / "vectors.h5"
    vectors_store(vectors, stimulus_sets([stimulus], images), store, {"source": "vectors"})
    return store
