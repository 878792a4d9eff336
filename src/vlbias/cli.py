"""The command line: one association test, the models and tests of a config, a results table, the
workflow (locally or on SLURM).

    vlbias run resources/stimuli/seat/weat1.yaml --model minilm        # one test, one model: a table row
    vlbias run resources/stimuli/ieat/age.yaml --model igpt --format md
    vlbias run my-test.yaml --store my-embeddings.h5                   # vectors in an embedding store
    vlbias run my-test.yaml --vectors mine.csv                         # your own vectors (CSV, NPY, HDF5)
    vlbias list models | tests | tables                                # what config/config.yaml holds
    vlbias show table1                                                 # a results table, as Markdown
    vlbias workflow --slurm -- --jobs 50                               # snakemake --profile profiles/slurm
    vlbias weights --dry-run                                           # what the models load, locked or not
    vlbias weights --update seat/minilm                                # resolve an entry anew, rewrite its lock

Paths are relative to the working directory, as the workflow's: run it in the repository (or a
project laid out like it: config/, resources/, results/). ``run`` uses the workflow's engine
(vlbias.associate.run_test) and settings (the config's ``stats``, flags override them) and gives
the columns of the workflow's tables (vlbias.report.tables.TABLE_COLUMNS).
"""

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from vlbias.errors import InputError
from vlbias.suites import plan
from vlbias.suites.grounded import plan as grounded_plan
from vlbias.suites.ieat import plan as ieat_plan
from vlbias.suites.seat import plan as seat_plan

CONFIG = "config/config.yaml"
SCHEMA = "workflow/schemas/config.schema.yaml"
SECTIONS = ("ieat", "seat", "grounded", "mlm")  # config sections with models
SLURM_PLUGIN = "snakemake_executor_plugin_slurm"


class UsageError(Exception):
    """A command given what it cannot use; the message says what to do instead."""


# --- the config -------------------------------------------------------------------------------------


def load_config(path):
    """The config at ``path``, checked as the workflow checks it (defaults filled in)."""
    from vlbias.config import check_config

    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such config (run in the repository, or give --config)") from None
    except yaml.YAMLError as e:
        raise InputError(path, f"not valid YAML: {e}") from None
    return check_config(config, schema_path())


def schema_path():
    """The workflow's schema: in the working directory's workflow/, else the repository's beside src/."""
    schemas = [Path(SCHEMA), Path(__file__).resolve().parents[2] / SCHEMA]
    schema = next((s for s in schemas if s.is_file()), None)
    if schema is None:
        raise UsageError(f"no {SCHEMA} here or beside the vlbias package: run in the repository")
    return schema


def models(config):
    """[(section, name, entry)] of every configured model, section by section."""
    return [(section, name, spec) for section in SECTIONS
            for name, spec in ((config.get(section) or {}).get("models") or {}).items()]


def find_model(config, name, suite):
    """(section, entry) of model ``name``: the stimulus's own suite first, then any section."""
    found = [(section, spec) for section, n, spec in models(config) if n == name]
    if not found:
        known = sorted({n for _, n, _ in models(config)})
        raise UsageError(f"no model '{name}' in the config; configured: {', '.join(known)}")
    return next(((s, spec) for s, spec in found if s == suite), found[0])


# --- run: one test ----------------------------------------------------------------------------------


def model_store(config, section, name, spec, stimulus, workdir):
    """The embedding store holding ``stimulus``'s vectors on model ``name``.

    Text stimuli are encoded here by the model's adapter, its weights fetched, locked and verified as
    the workflow's (vlbias.weights.prepare), through the workflow's content-keyed cache (a text the
    workflow encoded is not encoded again); image categories come from the store the workflow builds
    for the model (results/embeddings/<section>/<name>.h5).
    """
    if all(s.items is not None for s in stimulus.sets.values()):
        if "adapter" not in spec:
            raise UsageError(f"model '{name}' ({section}) has no adapter to encode text stimuli")
        from vlbias.io.cache import RecordCache, fingerprint
        from vlbias.models import build
        from vlbias.suites.seat import embed_stimuli
        from vlbias.weights import prepare

        # as the workflow's jobs load it: fetched (or found in the cache), checked against the lock, verified
        encoder = build(prepare(f"{section}/{name}", spec, cache=config["cache"], lock_path=config["weights_lock"]))
        store = Path(workdir) / f"{name}.h5"
        with RecordCache(Path(config["cache"], "embeddings", fingerprint(encoder.info))) as cache:
            embed_stimuli([stimulus], encoder, store, plan.provenance(spec), cache)
        return store
    store = Path(plan.embedding_path(section, name))
    if not store.is_file():
        raise UsageError(f"{stimulus.path} has image sets: their vectors on '{name}' come from the workflow's "
                         f"store {store}, not built yet (snakemake --cores all {store})")
    return store


def vectors_store(args, stimulus, workdir):
    """An embedding store of ``stimulus``'s sets from the user's vectors file (vlbias.io.vectors): text
    items keyed by their text, images by "<category>/<file>": each file the image manifest lists for
    the category (--manifest), else each the vectors file has under it."""
    from vlbias.io.vectors import read_vectors, stimulus_sets, vectors_store
    from vlbias.suites.ieat import image_files

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


def run(args):
    import h5py

    from vlbias.associate import run_test
    from vlbias.io.stimuli import load_stimulus
    from vlbias.report.tables import assemble

    stimulus = load_stimulus(args.stimulus)
    config = load_config(args.config) if args.model or args.config_given else None
    stats = dict(config["stats"]) if config else {"n_samples": 100_000, "exact": "auto", "seed": 0, "ci": None}
    for key in ("n_samples", "exact", "seed"):
        if getattr(args, key) is not None:
            stats[key] = getattr(args, key)
    ci = stats.pop("ci", None)
    if args.no_ci:
        ci = None
    elif args.ci or any(getattr(args, f"ci_{k}") is not None for k in ("level", "n_boot", "seed", "method")):
        ci = {"level": 0.95, "n_boot": 10_000, "seed": 0, "method": "bca", **(ci or {})}
        ci |= {k: getattr(args, f"ci_{k}") for k in ("level", "n_boot", "seed", "method")
               if getattr(args, f"ci_{k}") is not None}
    from vlbias.config import stats_problems

    problems = stats_problems({**stats, "ci": ci}, schema_path())
    if problems:  # the flags' values, with the config's limits (a config's own were checked when loaded)
        raise UsageError("; ".join(problems) + " (--n-samples, --seed, --ci-* set these keys)")
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
            section, spec = find_model(config, args.model, stimulus.suite)
            store, model = model_store(config, section, args.model, spec, stimulus, tmp), args.model
        row = run_test(stimulus, store, model, ci=ci, **stats)
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


def write(text, output):
    if output is None:
        sys.stdout.write(text)
        return
    from vlbias.io.atomic import atomic_path

    with atomic_path(output) as tmp:
        tmp.write_text(text, encoding="utf-8")


# --- list, show -------------------------------------------------------------------------------------


def list_(args):
    config = load_config(args.config)
    lines = []
    if args.what == "models":
        for section, name, spec in models(config):
            kind = spec.get("adapter") or f"source {spec.get('source')}"
            lines.append(f"{section}\t{name}\t{kind}\t{spec.get('model_id', '')}")
    elif args.what == "tests":
        for section in ("ieat", "seat"):
            folder = Path(config[section]["stimuli"])
            lines += [f"{section}\t{p.stem}\t{p}" for p in sorted(folder.glob("*.yaml"))]
        grounded = config.get("grounded") or {}
        if grounded:
            folder = Path(grounded["stimuli"])
            lines += [f"grounded/{p.parent.name}\t{p.stem}\t{p}" for p in sorted(folder.glob("*/*.yaml"))]
    else:
        for name, spec in config["ieat"]["tables"].items():
            lines.append(f"ieat\t{name}\t{ieat_plan.table_path(name)}\t{spec['caption']}")
        for name in config["seat"]["models"]:
            lines.append(f"seat\t{name}\t{seat_plan.table_path(name)}\tWEAT/SEAT on {name}")
        from vlbias.report.grounded import CAPTIONS

        for name, spec in ((config.get("grounded") or {}).get("tables") or {}).items():
            caption = spec.get("caption") or CAPTIONS.get(name, "")
            lines.append(f"grounded\t{name}\t{grounded_plan.table_path(name)}\t{caption}")
    write("".join(line + "\n" for line in lines), None)
    return 0


def table_path(name, config):
    """A results table by path, or by its name in the config (an iEAT table, a SEAT model, a
    grounded table), "<suite>/<name>" where two suites use the name: (CSV path, caption)."""
    if Path(name).suffix == ".csv":
        return Path(name), Path(name).stem
    from vlbias.report.grounded import CAPTIONS

    ieat, grounded = config["ieat"]["tables"], (config.get("grounded") or {}).get("tables") or {}
    tables = {f"ieat/{n}": (Path(ieat_plan.table_path(n)), spec["caption"]) for n, spec in ieat.items()}
    tables |= {f"seat/{n}": (Path(seat_plan.table_path(n)), f"Word- and sentence-level WEAT/SEAT on {n}")
               for n in config["seat"]["models"]}
    tables |= {f"grounded/{n}": (Path(grounded_plan.table_path(n)), spec.get("caption") or CAPTIONS.get(n, n))
               for n, spec in grounded.items()}
    found = [key for key in tables if name in (key, key.split("/", 1)[1])]
    if len(found) > 1:
        raise UsageError(f"table '{name}' is in several suites: say which, {' or '.join(found)}")
    if not found:
        raise UsageError(f"no table '{name}': give a CSV path or one of "
                         f"{', '.join(dict.fromkeys(k.split('/', 1)[1] for k in tables))}")
    return tables[found[0]]


def show(args):
    import pandas as pd

    from vlbias.associate import COLUMNS
    from vlbias.report.formats import markdown_table
    from vlbias.report.tables import TABLE_COLUMNS, to_markdown

    path, caption = table_path(args.table, load_config(args.config) if Path(args.table).suffix != ".csv" else {})
    if not path.is_file():
        raise UsageError(f"{path}: not built yet (snakemake --cores all {path})")
    printed = {"d_paper": str, "p_paper": str}  # the paper's values, as printed
    df = pd.read_csv(path, dtype=printed)
    df = df.fillna({c: "" for c in printed if c in df})
    if args.format == "csv":
        text = df.to_csv(index=False)
    elif set(COLUMNS) <= set(df.columns):  # an association table: the workflow's Markdown
        text = to_markdown(df.reindex(columns=[*TABLE_COLUMNS, *(c for c in df if c not in TABLE_COLUMNS)]),
                           caption)
    else:
        text = markdown_table(df, caption)
    write(text, None)
    return 0


# --- workflow ---------------------------------------------------------------------------------------


def workflow(args):
    profile = []
    if args.slurm:
        if importlib.util.find_spec(SLURM_PLUGIN) is None:
            raise UsageError("the SLURM profile needs Snakemake's SLURM executor plugin, which is not installed: "
                             "pip install -e '.[slurm]' (snakemake-executor-plugin-slurm); without it snakemake "
                             "stops at \"invalid choice: 'slurm'\"")
        profile = ["--profile", "profiles/slurm"]
    snakemake_args = args.snakemake_args[1:] if args.snakemake_args[:1] == ["--"] else args.snakemake_args
    return subprocess.run([sys.executable, "-m", "snakemake", *profile, *snakemake_args], check=False).returncode


# --- weights ----------------------------------------------------------------------------------------

LOCK = "config/weights.lock.yaml"


def _size(n):
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


def _describe(key, source, pin):
    """Lines saying what one source of an entry loads, and what the lock pins of it."""
    kind = source["kind"]
    if kind == "random":
        return [f"  {key}: random weights, seed {source['seed']}"]
    if kind == "local":
        return [f"  {key}: local {source['request']} (sha256 recorded by the weights stage)"]
    what = {"hub": lambda s: f"hub {s['repo']} @ {s['revision'] or 'main'}",
            "url": lambda s: f"url {s['url']}",
            "open_clip": lambda s: f"open_clip {s['arch']} pretrained '{s['tag']}' ({s['origin']})",
            "torchvision": lambda s: f"torchvision {s['arch']} {s['enum']} ({s['url']})"}[kind](source)
    if pin:
        files = pin["files"]
        total = sum(f["size"] for f in files.values())
        lines = [f"  {key}: {what}" + (f" -> locked {pin['commit']}" if pin.get("commit") else " (locked)")
                 + f", {len(files)} file(s), {_size(total)}"]
        lines += [f"      {name}  {_size(f['size'])}  sha256 {f['sha256']}" for name, f in files.items()]
        return lines
    lines = [f"  {key}: {what} (not locked yet: resolved and locked on the first fetch)"]
    if kind == "url" and not source.get("sha256"):
        lines.append(f"  warning: {key}: no pinned sha256 in the config (the lock pins the file once fetched)")
    return lines


def weights(args):
    from vlbias import weights as w
    from vlbias.config import weights_entries

    config = load_config(args.config)
    found = weights_entries(config)
    names = list(found)
    if args.names:
        unknown = [n for n in args.names if n not in found and not any(k.split("/", 1)[1] == n for k in found)]
        if unknown:
            raise UsageError(f"no weights entry {', '.join(unknown)}; configured: {', '.join(found) or 'none'}")
        names = [k for k in found if k in args.names or k.split("/", 1)[1] in args.names]
    lock = w.Lock(config.get("weights_lock") or LOCK)
    failed = []
    for name in names:
        try:
            _weights_entry(w, name, found[name], config, lock, args)
        except InputError as e:  # said, and the other entries fetched all the same
            print(f"vlbias weights: error: {name}: {e}", file=sys.stderr)
            failed.append(name)
    if not args.dry_run and len(failed) < len(names):
        print(f"lock: {lock.path}")
    if failed:
        print(f"vlbias weights: {len(failed)} of {len(names)} entries failed: {', '.join(failed)}", file=sys.stderr)
    return 2 if failed else 0


def _weights_entry(w, name, spec, config, lock, args):
    """List (--dry-run) or fetch one entry's weights."""
    if args.dry_run:
        pins = (lock.entry(name) or {}).get("sources") or {}
        sources = w.remote_sources(spec, w.kind_of(name))
        print(f"{name} ({spec['adapter']})")
        for key, source in sources.items():
            print("\n".join(_describe(key, source, None if args.update else pins.get(key))))
        return
    record = w.fetch(name, spec, cache=config["cache"], lock_path=lock.path, update=args.update)
    files = [f for s in record["sources"].values() for f in s["files"].values()]
    print(f"{name}: {len(files)} file(s), {_size(sum(f['size'] for f in files))}, verified")
    path = w.record_path(name)
    # the workflow's record, where it differs (or is no record): rewritten, so that its model jobs run again
    if path.is_file():
        try:
            same = w.read_record(path) == record
        except InputError:
            same = False
        if not same:
            w.write_record(path, record)


# --- the parser -------------------------------------------------------------------------------------


def parser():
    top = argparse.ArgumentParser(prog="vlbias", description=__doc__.split("\n\n")[0],
                                  epilog="vlbias <command> --help: the command's options")
    top.add_argument("--version", action="version", version=f"%(prog)s {__import__('vlbias').__version__}")
    sub = top.add_subparsers(dest="command", required=True, metavar="command")

    def config_option(p):
        p.add_argument("--config", default=CONFIG, help=f"the workflow config (default {CONFIG})")

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
    p.add_argument("--n-samples", type=int, help="permutation partitions (default: the config's, else 100000)")
    p.add_argument("--exact", choices=["auto", "true", "false"], help="enumerate all partitions (default auto)")
    p.add_argument("--seed", type=int, help="seed of the sampled partitions")
    ci = p.add_mutually_exclusive_group()
    ci.add_argument("--ci", action="store_true", help="add d's bootstrap confidence interval")
    ci.add_argument("--no-ci", action="store_true", help="no interval, whatever the config says")
    p.add_argument("--ci-level", type=float, help="the interval's level (0.95)")
    p.add_argument("--ci-n-boot", type=int, help="bootstrap replicates (10000)")
    p.add_argument("--ci-seed", type=int, help="the bootstrap's seed (0)")
    p.add_argument("--ci-method", choices=["bca", "percentile"], help="the interval (bca)")
    p.add_argument("--format", choices=["csv", "md", "json"], default="csv", help="output format (csv)")
    p.add_argument("-o", "--output", help="write here instead of the standard output")
    p.set_defaults(func=run)

    p = sub.add_parser("list", help="the models, tests or tables of a config",
                       description="Tab-separated: models (section, name, adapter or source, model id), "
                                   "tests (suite, id, stimulus file) or tables (suite, name, CSV, caption).")
    p.add_argument("what", choices=["models", "tests", "tables"])
    config_option(p)
    p.set_defaults(func=list_)

    p = sub.add_parser("show", help="a results table, as Markdown",
                       description="Print a results table the workflow built, by its name in the config "
                                   "(an iEAT table, a SEAT model, a grounded table) or its CSV path.")
    p.add_argument("table", help="a table name (e.g. table1, minilm; ieat/table3 or grounded/table3 where two "
                                 "suites use it) or a CSV path")
    p.add_argument("--format", choices=["md", "csv"], default="md")
    config_option(p)
    p.set_defaults(func=show)

    p = sub.add_parser("workflow", help="run the workflow (snakemake), locally or on SLURM",
                       description="snakemake in the working directory (the repository), with "
                                   "--profile profiles/slurm when --slurm is given; arguments after -- go "
                                   "to snakemake.")
    p.add_argument("--slurm", action="store_true", help="on a SLURM cluster (needs pip install -e '.[slurm]')")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="arguments for snakemake (after --)")
    p.set_defaults(func=workflow)

    p = sub.add_parser("weights", help="fetch the weights the config's models load, and lock them",
                       description="Fetch every model and detector entry's weights (hub files, checkpoint and "
                                   "detector URLs, open_clip tags) into the cache, verify them against the lock "
                                   f"(the config's weights_lock, default {LOCK}) and lock what was resolved. "
                                   "Entries are named <section>/<name> (or <name> alone).")
    p.add_argument("names", nargs="*", metavar="NAME", help="entries (default: all)")
    p.add_argument("--update", action="store_true", help="resolve the entries anew and rewrite their lock entries")
    p.add_argument("--dry-run", action="store_true", help="list what would be fetched and what is locked; no network")
    config_option(p)
    p.set_defaults(func=weights)
    return top


def main(argv=None):
    args = parser().parse_args(argv)
    if args.command == "run":
        args.config_given = args.config is not None
        args.config = args.config or CONFIG
        if args.exact is not None:
            args.exact = {"true": True, "false": False}.get(args.exact, args.exact)
    try:
        return args.func(args)
    except (UsageError, InputError) as e:
        print(f"vlbias {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
