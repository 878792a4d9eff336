import logging

from vlbias.io.fetch import write_manifest
from vlbias.logs import setup_logging

setup_logging(snakemake.log[0])
for why in snakemake.params.absent.values():
    logging.getLogger("skew").warning(why)
write_manifest(snakemake.output[0], [{"dataset": d, "reason": why} for d, why in snakemake.params.absent.items()],
               ["dataset", "reason"])
