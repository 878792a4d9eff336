import logging

from vlbias.io.atomic import atomic_path
from vlbias.logs import setup_logging
from vlbias.stats.row import GROUNDED
from vlbias.suites.grounded.jobs import run_experiments

setup_logging(snakemake.log[0])
rows = run_experiments(snakemake.input[0], masked_statistic=snakemake.params.masked_statistic,
                       **snakemake.params.stats)
with atomic_path(snakemake.output[0]) as tmp:
    GROUNDED.frame(rows).to_csv(tmp, index=False)
logging.getLogger("grounded_experiment").info("%d rows, %d ok", len(rows), sum(r["status"] == "ok" for r in rows))
