import pandas as pd

from vlbias.logs import setup_logging
from vlbias.report.tables import assemble, write_table

setup_logging(snakemake.log[0])
p = snakemake.params
rows = pd.concat([pd.read_csv(f) for f in snakemake.input.rows]).to_dict("records")
write_table(assemble(rows, p.tests, p.models), snakemake.output.csv, snakemake.output.md, p.caption)
