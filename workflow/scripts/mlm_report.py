import logging

from vlbias.logs import setup_logging
from vlbias.suites.mlm.scores import read_logprob_table
from vlbias.suites.mlm.stimuli import load_mlm_stimulus
from vlbias.report.mlm import write_report

setup_logging(snakemake.log[0])
case_study, entities = (load_mlm_stimulus(p) for p in snakemake.input.stimuli)
model = snakemake.params.model
out = write_report(read_logprob_table(snakemake.input.logprobs), read_logprob_table(snakemake.input.reference),
                   case_study, entities, model, snakemake.params.reference, dict(snakemake.output.items()))
contra = out["contradictions"]
logging.getLogger("mlm_report").info("%s: %d entities, %d case-study images, %d contradict", model["name"],
                                     len(out["entities"]), len(contra), int(contra["contradicts"].sum()))
