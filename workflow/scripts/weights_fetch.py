import logging

from vlbias.logs import setup_logging
from vlbias.weights import fetch, write_record

setup_logging(snakemake.log[0])
p = snakemake.params
record = fetch(p.name, p.spec, cache=p.cache, lock_path=p.lock)
write_record(snakemake.output[0], record)
logging.getLogger("weights_fetch").info("%s: %s", p.name, snakemake.output[0])
