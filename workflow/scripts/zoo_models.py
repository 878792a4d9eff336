from vlbias.logs import setup_logging
from vlbias.suites.zoo.metadata import read_accuracy
from vlbias.suites.zoo.select import write_model_rows

setup_logging(snakemake.log[0])
p = snakemake.params
write_model_rows(snakemake.output[0], p.models, p.zoo, read_accuracy(snakemake.input.accuracy))
