from vlbias.io.stimuli import load_stimulus
from vlbias.logs import setup_logging
from vlbias.models import build
from vlbias.report.speccurve import write_robustness
from vlbias.robustness import run_models, summary
from vlbias.weights import localize, read_record

setup_logging(snakemake.log[0])
p, out = snakemake.params, snakemake.output
records = dict(zip(p.models, snakemake.input.weights, strict=True))


def open_encoder(name, entry):
    # a variant loads the files its model's record verified, offline; a twin loads none
    spec = entry if entry.get("weights") == "random" else localize(
        f"seat/{name}", entry, read_record(records[name]), cache=p.cache, lock_path=p.weights_lock)
    return build({**spec, "threads": p.threads})


stimuli = [load_stimulus(f) for f in snakemake.input.stimuli]
curve, twins = run_models(stimuli, p.models, p.axes, p.stats, open_encoder, p.cache, threads=snakemake.threads)
write_robustness(summary(curve, twins, p.axes), curve, twins, "How robust each SEAT d is", csv=out.csv, md=out.md,
                 html=out.html, specifications=out.specifications, curves=out.curves, alpha=p.axes["alpha"])
