import logging

import pandas as pd

from vlbias.logs import setup_logging
from vlbias.report.grounded import comparison, read_printed
from vlbias.report.tables import write_tables
from vlbias.suites.grounded.plan import COMPARISON_CAPTION

setup_logging(snakemake.log[0])
p = snakemake.params
rows = pd.concat([pd.read_csv(f, dtype=str, keep_default_na=False) for f in snakemake.input.results], ignore_index=True)
protocols = {name: rows[rows["protocol"] == name].to_dict("records") for name in p.protocols}
df = comparison(read_printed(snakemake.input.published), protocols, alpha=p.alpha)
write_tables(df, COMPARISON_CAPTION,
             csv=snakemake.output.csv, md=snakemake.output.md,
             note="printed: as in the paper; <protocol> d / p: our effect size and p of the same cell; Table 7: "
                  "significant tests of the half; Section 5: experiment 3's mean effect size and share significant.")
logging.getLogger("grounded_comparison").info("%d printed cells compared for %s", len(df), ", ".join(p.protocols))
