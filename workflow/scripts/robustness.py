import tempfile

from vlbias.io.fetch import read_manifest
from vlbias.io.stimuli import load_stimulus
from vlbias.logs import setup_logging
from vlbias.models import build
from vlbias.report.speccurve import write_robustness
from vlbias.robustness import run_models, summary
from vlbias.suites.ieat import image_entries
from vlbias.suites.robustness import image_sets
from vlbias.weights import localize, read_record

setup_logging(snakemake.log[0])
p, inp, out = snakemake.params, snakemake.input, snakemake.output
records = dict(zip(p.models, inp.weights, strict=True))
# each model's files as its record verified them, offline: its variants and its twins (which keep the
# files a random model reads: vlbias.robustness.twin_entries) build from them
entries = {name: entry if entry.get("weights") == "random" else localize(
    f"{p.suite}/{name}", entry, read_record(records[name]), cache=p.cache, lock_path=p.weights_lock)
    for name, entry in p.models.items()}
stimuli = [load_stimulus(f) for f in inp.stimuli]
images = {}
if p.image_settings:
    listed = image_entries(inp.manifest, p.source, p.mirror, p.cache)
    images = {name: (image_sets(stimuli, listed, read_manifest(store)), p.image_settings[name])
              for name, store in zip(p.models, inp.stores, strict=True)}
with tempfile.TemporaryDirectory() as workdir:
    curve, twins = run_models(stimuli, entries, p.axes, p.stats, lambda name, spec: build({**spec, "threads": p.threads}),
                              p.cache, threads=snakemake.threads, images=images, workdir=workdir)
write_robustness(summary(curve, twins, p.axes), curve, twins, f"How robust each {p.suite.upper()} d is", csv=out.csv,
                 md=out.md, html=out.html, specifications=out.specifications, curves=out.curves, alpha=p.axes["alpha"])
