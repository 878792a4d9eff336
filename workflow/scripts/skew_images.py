from vlbias.logs import setup_logging
from vlbias.suites.skew import build_labelled_store

setup_logging(snakemake.log[0])
p = snakemake.params
build_labelled_store(p.spec, p.folder, snakemake.output.store, snakemake.output.status, p.settings, snakemake.threads)
