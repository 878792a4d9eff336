from vlbias.suites.zoo.text import load_test
from vlbias.logs import setup_logging
from vlbias.report.zoo import write_eats

setup_logging(snakemake.log[0])
p = snakemake.params
write_eats([load_test(f) for f in snakemake.input.stimuli], dict(zip(p.models, snakemake.input.stores)),
           snakemake.input.models, snakemake.output, threads=snakemake.threads, ci=p.ci, **p.stats)
