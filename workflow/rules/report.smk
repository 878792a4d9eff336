# The report, `snakemake --report report.html`: every table as a page of its own (written by its
# table job beside the CSV), a heatmap per suite and the published against the reproduced effect
# sizes (the rules here), the MLM figures; each with its caption (workflow/report/*.rst). While only
# a report is written, the inputs are what exists (common.smk: existing).


rule ieat_figures:
    input:
        unpack(lambda w: existing({table: f"results/ieat/{table}.csv" for table in IEAT_TABLES})),
    output:
        heatmap=report(
            "results/ieat/heatmap.png",
            caption="../report/ieat_heatmap.rst",
            category="iEAT",
            subcategory="Figures",
            labels={"figure": "effect sizes (heatmap)"},
        ),
        published=report(
            "results/ieat/published.png",
            caption="../report/ieat_published.rst",
            category="iEAT",
            subcategory="Figures",
            labels={"figure": "published vs reproduced d"},
        ),
    log:
        "results/logs/ieat_figures.log",
    conda:
        "../../environment.yml"
    threads: 1
    params:
        title="iEAT",
    script:
        "../scripts/suite_figures.py"


rule seat_figures:
    input:
        unpack(lambda w: existing({model: f"results/seat/{model}/table.csv" for model in SEAT["models"]})),
    output:
        heatmap=report(
            "results/seat/heatmap.png",
            caption="../report/seat_heatmap.rst",
            category="SEAT",
            subcategory="Figures",
            labels={"figure": "effect sizes (heatmap)"},
        ),
    log:
        "results/logs/seat_figures.log",
    conda:
        "../../environment.yml"
    threads: 1
    params:
        title="WEAT/SEAT",
    script:
        "../scripts/suite_figures.py"


rule grounded_figures:
    input:
        results=lambda w: existing(GROUNDED_PLAN.main_results()),
        published=GROUNDED.get("published", []),
    output:
        heatmap=report(
            "results/grounded/heatmap.png",
            caption="../report/grounded_heatmap.rst",
            category="Grounded",
            subcategory="Figures",
            labels={"figure": "effect sizes (heatmap)"},
        ),
        published=report(
            "results/grounded/published.png",
            caption="../report/grounded_published.rst",
            category="Grounded",
            subcategory="Figures",
            labels={"figure": "published vs reproduced d"},
        ),
    log:
        "results/logs/grounded_figures.log",
    conda:
        "../../environment.yml"
    threads: 1
    params:
        columns=GROUNDED_PLAN.experiments.get("columns"),
        levels=GROUNDED_PLAN.grounded.get("levels"),
        groups=GROUNDED.get("tables", {}).get("table3", {}).get("groups"),
    script:
        "../scripts/grounded_figures.py"
