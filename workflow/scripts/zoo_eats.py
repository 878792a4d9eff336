from vlbias.logs import setup_logging
from vlbias.report.zoo import write_eats
from vlbias.suites.zoo.cross_modal import battery

setup_logging(snakemake.log[0])
p = snakemake.params
write_eats(battery(snakemake.input.stimuli, p.cross_modal, p.oasis), dict(zip(p.models, snakemake.input.stores)),
           snakemake.input.models, snakemake.output, threads=snakemake.threads, ci=p.ci, **p.stats)
