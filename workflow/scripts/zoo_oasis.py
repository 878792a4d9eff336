from vlbias.logs import setup_logging
from vlbias.suites.zoo.oasis import build_oasis_store

setup_logging(snakemake.log[0])
p = snakemake.params
build_oasis_store(p.folder, snakemake.input.manifest, snakemake.output.store, snakemake.output.status, p.settings,
                  workers=snakemake.threads)
