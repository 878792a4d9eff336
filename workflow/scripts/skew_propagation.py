import pandas as pd

from vlbias.logs import setup_logging
from vlbias.report.skew import plot_propagation
from vlbias.report.tables import write_tables
from vlbias.suites.skew import propagation_table

setup_logging(snakemake.log[0])
p = snakemake.params
skew = pd.concat([pd.read_csv(f) for f in snakemake.input.tables]).to_dict("records")
table = propagation_table(skew, pd.read_csv(snakemake.input.eat).to_dict("records"), p.propagation["map"],
                          measure=p.propagation["measure"], k=p.k, level=p.level)
write_tables(table, "Intrinsic d against retrieval skew", csv=snakemake.output.csv)
plot_propagation(table, snakemake.output.png)
