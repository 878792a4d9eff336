import logging

import pandas as pd

from vlbias.images.acquire import TABLE1_COLUMNS, table1_rows
from vlbias.io.fetch import read_manifest
from vlbias.logs import setup_logging
from vlbias.report.tables import write_tables
from vlbias.suites.grounded.plan import TABLE1_CAPTION

setup_logging(snakemake.log[0])
datasets = snakemake.params.datasets
summaries = dict(zip(datasets, map(read_manifest, snakemake.input.summaries)))
failures = {d: (read_manifest(path), path) for d, path in zip(datasets, snakemake.input.failures)}
df = pd.DataFrame(table1_rows(read_manifest(snakemake.input.published), summaries, failures), columns=TABLE1_COLUMNS)
for column in ("listed", "obtained", "duplicates", "paper"):
    df[column] = pd.array([int(v) if v != "" else None for v in df[column]], dtype="Int64")
write_tables(df, TABLE1_CAPTION,
             csv=snakemake.output.csv, md=snakemake.output.md, tex=snakemake.output.tex,
             html=snakemake.output.html, label="tab:grounded-table1",
             note="listed: images the upstream URL lists name; obtained: images that arrived and decode; "
                  "duplicates: obtained images whose content an earlier image of the same test has; note: why "
                  "none was obtained (e.g. the local mirror holds the URL lists, not the images: download them "
                  "with `mirror: null`). Datasets not configured here show the paper's number only.")
logging.getLogger("grounded_table1").info("%d rows", len(df))
