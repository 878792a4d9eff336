"""vlbias list: the models, tests or tables of a config, every suite's (vlbias.suites.registry), one
tab-separated line each."""

from vlbias.cli.common import config_option, load_config, write


def add_parser(sub):
    p = sub.add_parser("list", help="the models, tests or tables of a config",
                       description="Tab-separated: models (suite, name, adapter or source, model id), "
                                   "tests (suite, id, stimulus file) or tables (suite, name, CSV, caption).")
    p.add_argument("what", choices=["models", "tests", "tables"])
    config_option(p)
    p.set_defaults(func=main)


def main(args):
    from vlbias.config import configured_models
    from vlbias.suites.registry import suites

    config = load_config(args.config)
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
