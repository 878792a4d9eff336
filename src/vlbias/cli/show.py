"""vlbias show: a results table the workflow built, by its name in the config (any suite's table:
vlbias.suites.registry) or its CSV path, as Markdown or CSV: an association table as the workflow's
Markdown, an ML-EAT table as its page's view (vlbias.report.mleat.compact), ``--all`` every column."""

from pathlib import Path

from vlbias.cli.common import UsageError, config_option, load_config, write


def add_parser(sub):
    p = sub.add_parser("show", help="a results table, as Markdown",
                       description="Print a results table the workflow built, by its name (`vlbias list tables`: "
                                   "an iEAT table, a SEAT model, a grounded table, an MLM model's table) or its CSV "
                                   "path.")
    p.add_argument("table", help="a table name (e.g. table1, minilm, lxmert/scores; ieat/table3 or grounded/table3 "
                                 "where two suites use it) or a CSV path")
    p.add_argument("--format", choices=["md", "csv"], default="md")
    p.add_argument("--all", action="store_true", help="every column of the CSV (an association or ML-EAT table shows "
                                                      "its main numbers by default)")
    config_option(p)
    p.set_defaults(func=main)


def main(args):
    import pandas as pd

    from vlbias.report.formats import markdown_table
    from vlbias.report.tables import TABLE_COLUMNS, to_markdown
    from vlbias.stats.row import ASSOCIATION, MLEAT, renamed

    path, caption = table_path(args.table, load_config(args.config) if Path(args.table).suffix != ".csv" else {})
    if not path.is_file():
        raise UsageError(f"{path}: not built yet (snakemake --cores all {path})")
    printed = {"d_paper": str, "p_paper": str}  # the paper's values, as printed
    df = pd.read_csv(path, dtype=printed)
    df = renamed(df.fillna({c: "" for c in printed if c in df}))  # a table written before a rename too
    if args.format == "csv":
        text = df.to_csv(index=False)
    elif args.all:
        text = markdown_table(df, caption)
    elif set(MLEAT.computed) <= set(df.columns):
        from vlbias.report.mleat import compact  # matplotlib's import: for this table alone

        text = markdown_table(compact(df), caption, "Every statistic with its settings and provenance: --all.")
    elif set(ASSOCIATION.columns) <= set(df.columns):  # an association table: the workflow's Markdown
        text = to_markdown(df.reindex(columns=[*TABLE_COLUMNS, *(c for c in df if c not in TABLE_COLUMNS)]),
                           caption)
    else:
        text = markdown_table(df, caption)
    write(text, None)
    return 0


def table_path(name, config):
    """A results table by path, or by its name (each suite's tables, vlbias.suites.stage.Suite.tables),
    "<suite>/<name>" where two suites use the name: (CSV path, caption)."""
    if Path(name).suffix == ".csv":
        return Path(name), Path(name).stem
    from vlbias.suites.registry import suites

    tables = {f"{suite.name}/{n}": table for suite in suites(config) for n, table in suite.tables(config).items()}
    found = [key for key in tables if name in (key, key.split("/", 1)[1])]
    if len(found) > 1:
        raise UsageError(f"table '{name}' is in several suites: say which, {' or '.join(found)}")
    if not found:
        raise UsageError(f"no table '{name}': give a CSV path or one of "
                         f"{', '.join(dict.fromkeys(k.split('/', 1)[1] for k in tables))}")
    return Path(tables[found[0]].path), tables[found[0]].caption
