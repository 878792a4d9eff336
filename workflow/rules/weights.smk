# Weights as inputs (vlbias.weights): one job per model or detector entry fetches what the entry
# loads into the cache, checked against the weights lock (config key `weights_lock`), and writes its
# record; every job that loads the entry reads that record, checks it against the entry and the lock,
# and loads offline from the verified files. A local rule: on a cluster it runs on the submitting
# node, where the network is. `snakemake weights` fetches what the configured targets need;
# `snakemake -n weights` lists it. A record the lock no longer pins (its entry changed: a `git pull`)
# is dated back when the workflow starts (the Snakefile), so its fetch runs again; the lock is an
# input of every fetch, `ancient`: one entry written does not make the others' records outdated.

WEIGHTS_ENTRIES = registry.weights_entries(config)  # {"<stage>/<name>": entry}


# on a cluster (profiles/slurm) it runs on the submitting node: it downloads (the model jobs load
# offline from what it fetched; compute nodes often have no network)
localrules:
    weights_fetch,


rule weights_fetch:
    input:
        lock=ancient(config["weights_lock"]),
    output:
        record_path("{section}/{entry}"),
    log:
        "results/logs/weights_fetch/{section}/{entry}.log",
    wildcard_constraints:
        section=alternatives(sorted({name.split("/", 1)[0] for name in WEIGHTS_ENTRIES})),
        entry=alternatives(sorted({name.split("/", 1)[1] for name in WEIGHTS_ENTRIES})),
    conda:
        "../../environment.yml"
    params:
        name=lambda w: f"{w.section}/{w.entry}",
        spec=lambda w: WEIGHTS_ENTRIES[f"{w.section}/{w.entry}"],
        cache=config["cache"],
    script:
        "../scripts/weights_fetch.py"


rule weights:
    input:
        registry.weights_records(config),
