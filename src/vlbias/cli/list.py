"""vlbias list: the models, tests or tables of a config, every suite's (vlbias.suites.registry), one
tab-separated line each."""

from vlbias.cli.common import config_option, load_config, write


def add_parser(sub):
    p = sub.add_parser("list", help="the models, tests or tables of a config, or what its zoo selects",
                       description="Tab-separated: models (suite, name, adapter or source, model id), "
                                   "tests (suite, id, stimulus file), tables (suite, name, CSV, caption), or zoo: "
                                   "the models the config's zoo section selects (without one: open_clip's whole "
                                   "pretrained registry) with their metadata, a header line first; offline, no "
                                   "weights (docs/zoo.md).")
    p.add_argument("what", choices=["models", "tests", "tables", "zoo"])
    p.add_argument("--format", choices=["tsv", "csv"], default="tsv", help="zoo: tab- or comma-separated")
    config_option(p)
    p.set_defaults(func=main)


def main(args):
    from vlbias.config import configured_models
    from vlbias.suites.registry import suites

    config = load_config(args.config)
    if args.what == "zoo":
        return _zoo(config, args.format)
    if args.what == "models":
        lines = [f"{suite}\t{name}\t{spec.get('adapter') or 'source ' + str(spec.get('source'))}\t"
                 f"{spec.get('model_id', '')}" for suite, name, spec in configured_models(config)]
    elif args.what == "tests":
        lines = ["\t".join(test) for suite in suites(config) for test in suite.tests(config)]
    else:
        lines = [f"{suite.name}\t{name}\t{table.path}\t{table.caption}"
                 for suite in suites(config) for name, table in suite.tables(config).items()]
    write("".join(line + "\n" for line in lines), None)
    return 0


def _zoo(config, form):
    import io

    import pandas as pd

    from vlbias.suites.zoo.select import ROW_COLUMNS

    out = io.StringIO()
    pd.DataFrame(listing(config)).reindex(columns=ROW_COLUMNS).to_csv(out, index=False, sep="," if form == "csv" else "\t")
    write(out.getvalue(), None)
    return 0


def listing(config):
    """The rows `vlbias list zoo` prints: the config's zoo selection, or without a zoo section open_clip's
    whole registry (``select: {pairs: all}``), each model with its metadata; open_clip's accuracy table
    read from the mirror or the pinned commit into the cache (no weights, no model built but on the meta
    device)."""
    import copy

    from vlbias.config import check_config, schema_path
    from vlbias.suites.zoo import accuracy_path
    from vlbias.suites.zoo.metadata import read_accuracy
    from vlbias.suites.zoo.plan import ZooPlan
    from vlbias.suites.zoo.select import model_rows

    if not config.get("zoo"):
        config = check_config({**copy.deepcopy(config), "zoo": {"select": {"pairs": "all"}}}, schema_path())
    plan = ZooPlan(config)
    return model_rows(plan.models, config["zoo"], read_accuracy(accuracy_path(config)))
