import logging

import pandas as pd

from vlbias.io.atomic import atomic_path
from vlbias.logs import setup_logging
from vlbias.suites.grounded.jobs import RESULT_COLUMNS, run_experiments

setup_logging(snakemake.log[0])
rows = run_experiments(snakemake.input[0], masked_statistic=snakemake.params.masked_statistic,
                       **snakemake.params.stats)
with atomic_path(snakemake.output[0]) as tmp:
    pd.DataFrame(rows).reindex(columns=RESULT_COLUMNS).to_csv(tmp, index=False)
logging.getLogger("grounded_experiment").info("%d rows, %d ok", len(rows), sum(r["status"] == "ok" for r in rows))
