"""The command line (vlbias.cli), as a user runs it: `python -m vlbias ...` in a project directory."""

import json
import os
import re
import subprocess
import sys
import tomllib

import pandas as pd
import pytest
from helpers import REPO
from helpers.project import copy_project

from vlbias.report.tables import TABLE_COLUMNS
from vlbias.stats.row import MLEAT

pytestmark = pytest.mark.workflow  # runs the real Snakefile for the tables it compares with


ENV = {"PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
       "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def vlbias(cwd, *args):
    return subprocess.run([sys.executable, "-m", "vlbias", *args], cwd=cwd, env={**os.environ, **ENV},
                          capture_output=True, text=True, timeout=600, check=False)


# Several commands in one interpreter (its start, with numpy, pandas and jsonschema, costs more than a
# command that fails on its input): each one's exit status and what it wrote to file descriptors 1 and 2,
# as `python -m vlbias` would give them (argparse's exit, an uncaught exception's traceback, a warning
# shown again for each command, C libraries' output included).
SEVERAL = """
import json, os, sys, tempfile, traceback, warnings
from vlbias.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1), os.dup2(err.fileno(), 2)
        try:
            with warnings.catch_warnings():
                code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
        results.append([code or 0, *(f.seek(0) or f.read().decode() for f in (out, err))])
print(json.dumps(results))
"""


def vlbias_several(cwd, *argvs):
    """[CompletedProcess] of ``vlbias ARGV`` for each of ``argvs``, run one after the other in one interpreter."""
    proc = subprocess.run([sys.executable, "-c", SEVERAL, json.dumps(argvs)], cwd=cwd, env={**os.environ, **ENV},
                          capture_output=True, text=True, timeout=600, check=True)
    return [subprocess.CompletedProcess(["vlbias", *argv], code, out, err)
            for argv, (code, out, err) in zip(argvs, json.loads(proc.stdout), strict=True)]


@pytest.fixture(scope="module")
def project(tmp_path_factory, built_project):
    """A copy of the session's built project (tests/conftest.py) as a run of t2 and the SEAT table alone
    would leave it for the commands tested here: the tiny-clip store and t1 not built."""
    root = copy_project(built_project, tmp_path_factory.mktemp("cli"))
    for path in ("results/embeddings/ieat/tiny-clip.h5", "results/ieat/t1.csv"):
        (root / path).unlink()
    return root


def test_help_everywhere(tmp_path):
    top = vlbias(tmp_path, "--help")
    assert top.returncode == 0 and all(c in top.stdout for c in ("run", "list", "show", "workflow"))
    commands = ("run", "list", "show", "workflow")
    for command, out in zip(commands, vlbias_several(tmp_path, *([c, "--help"] for c in commands)), strict=True):
        assert out.returncode == 0 and out.stdout.startswith(f"usage: vlbias {command}"), out.stderr
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"vlbias": "vlbias.cli:main"}  # the console script is the same entry


def test_run_gives_the_workflows_row(project):
    # an image test on the published vectors (the store the workflow built, the config's stats), and a
    # text test: encoded here by the model's adapter, through the workflow's cache
    image, text = vlbias_several(project, ["run", "resources/stimuli/ieat/insect-flower.yaml", "--model", "pub"],
                                 ["run", "resources/stimuli/seat/weat-toy.yaml", "--model", "minilm", "--format",
                                  "json"])
    assert image.returncode == 0, image.stderr
    mine = pd.read_csv(pd.io.common.StringIO(image.stdout))
    table = pd.read_csv(project / "results/ieat/t2.csv")
    pd.testing.assert_frame_equal(mine, table[mine.columns])  # every column, the interval included
    assert list(mine.columns) == TABLE_COLUMNS
    assert text.returncode == 0, text.stderr
    [row] = json.loads(text.stdout)
    seat = pd.read_csv(project / "results/seat/minilm/table.csv").set_index("test").loc["weat-toy"]
    for column in ("d", "d_low", "d_high", "p", "n_x", "n_samples", "model_id"):
        assert row[column] == pytest.approx(seat[column]) if isinstance(row[column], float) else \
            row[column] == seat[column], column


# The program as its console script runs it, with a last exit handler (run after vlbias's own, last in
# first out) saying whether the objects torch and transformers made were frozen out of the exit's collections.
PROGRAM = """
import atexit, gc, sys
atexit.register(lambda: print(f"frozen at exit: {gc.get_freeze_count() > 0}", file=sys.stderr))
from vlbias.cli import main
sys.argv[0] = "vlbias"
sys.exit(main())
"""


def test_run_shows_its_progress_and_exits_promptly(project):
    proc = subprocess.run([sys.executable, "-c", PROGRAM, "run", "resources/stimuli/seat/weat-toy.yaml", "--model",
                           "minilm"], cwd=project, env={**os.environ, **ENV}, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    *logged, last = proc.stderr.splitlines()
    messages = [line.split(" INFO ", 1)[1] for line in logged if " INFO " in line]
    # as a workflow job's terminal: the steps and the encoding's progress, before the row is printed
    assert messages[0] == "resources/stimuli/seat/weat-toy.yaml on minilm"
    assert "seat/minilm: encoding weat-toy (the model built if the cache lacks a text)" in messages
    assert any(m.startswith("texts: ") and " done in " in m for m in messages), messages
    assert last == "frozen at exit: True"


def test_run_options_override_the_config(project):
    md, out = vlbias_several(project, ["run", "resources/stimuli/ieat/insect-flower.yaml", "--model", "pub", "--exact",
                                       "false", "--n-samples", "500", "--seed", "3", "--no-ci", "--format", "md",
                                       "-o", "row.md"],
                             ["run", "resources/stimuli/ieat/insect-flower.yaml", "--store",
                              "results/embeddings/ieat/pub.h5", "--name", "mine", "--ci-method", "percentile",
                              "--ci-n-boot", "200"])
    assert md.returncode == 0 and md.stdout == "", md.stderr
    md = (project / "row.md").read_text()
    assert md.startswith("**Insect-Flower on pub**") and "| d | p |" in md and " ± " in md  # sampled: with its error
    row = pd.read_csv(pd.io.common.StringIO(out.stdout)).iloc[0]
    assert row["model"] == "mine" and row["ci_method"] == "percentile" and row["ci_n_boot"] == 200
    assert row["n_samples"] == 100_000 or row["exact"]  # no --config: the defaults, exact here (252 partitions)


def test_list_and_show(project):
    # a table written before n_t became n_x (vlbias.stats.row.RENAMED) shows as today's
    table = (project / "results/ieat/t2.csv").read_text()
    (project / "t2.csv").write_text(table.replace(",n_x,", ",n_t,", 1))
    models, tests, tables, shown, seat, mleat, every, new, old = vlbias_several(
        project, ["list", "models"], ["list", "tests"], ["list", "tables"], ["show", "t2"],
        ["show", "results/seat/minilm/table.csv"], ["show", "mleat/t2"], ["show", "mleat/t2", "--all"],
        ["show", "results/ieat/t2.csv"], ["show", "t2.csv"])
    assert old.returncode == 0 and old.stdout == new.stdout and "| n_x | n_a |" in old.stdout
    assert models.stdout.splitlines() == ["ieat\tpub\tsource published\ttoy",
                                          "ieat\ttiny-clip\topen_clip\ttiny random ViT",
                                          "seat\tminilm\tsentence\tsentence-transformers/all-MiniLM-L6-v2"]
    assert "ieat\tinsect-flower\tresources/stimuli/ieat/insect-flower.yaml\n" in tests.stdout
    assert "seat\tweat-toy\t" in tests.stdout
    assert "ieat\tt2\tresults/ieat/t2.csv\ttoy 2\n" in tables.stdout
    # each table's ML-EAT, by "mleat/<table>"
    assert "ieat\tmleat/t2\tresults/ieat/mleat/t2.csv\tML-EAT: toy 2\n" in tables.stdout
    assert "seat\tmleat/minilm\tresults/seat/mleat/minilm.csv\t" in tables.stdout
    # a table by its name: the workflow's own Markdown
    assert shown.returncode == 0 and shown.stdout == (project / "results/ieat/t2.md").read_text()
    assert seat.stdout.startswith("**table**")
    # an ML-EAT table: its page's columns, rounded (55 columns of 17 digits); --all: every column
    header, rule, first = mleat.stdout.splitlines()[2:5]
    assert mleat.returncode == 0 and header.startswith("| test | model | n (X, Y, A, B) | pattern |"), mleat.stdout
    assert header.count("|") == 16 and re.search(r"\| -?\d\.\d\d \| ", first), first
    assert "--all" in mleat.stdout.splitlines()[-1]
    assert all(f" {c} |" in every.stdout.splitlines()[2] for c in MLEAT.computed)


def test_run_on_own_vectors_gives_the_stores_row(project):
    # the workflow's store of the published vectors, written out as a user's CSV: the same row
    from vlbias.io.store import read_set

    rows = []
    for category in ("toy/flower", "toy/insect", "toy/pleasant", "toy/unpleasant"):
        vectors, ids = read_set(project / "results/embeddings/ieat/pub.h5", category)
        rows += [[f"{category}/{i}", *v] for i, v in zip(ids, vectors, strict=True)]
    pd.DataFrame(rows, columns=["id", *range(len(rows[0]) - 1)]).to_csv(project / "mine.csv", index=False)
    # and a manifest naming an image the file has no vector for
    (project / "more.tsv").write_text("category\tfile\ntoy/flower\tnew.png\n" + "".join(
        f"{r[0].rsplit('/', 1)[0]}\t{r[0].rsplit('/', 1)[1]}\n" for r in rows))
    common = ["run", "resources/stimuli/ieat/insect-flower.yaml", "--no-ci", "--format", "json"]
    mine, store, out = vlbias_several(project, [*common, "--vectors", "mine.csv"],
                                      [*common, "--store", "results/embeddings/ieat/pub.h5"],
                                      [*common, "--vectors", "mine.csv", "--manifest", "more.tsv"])
    [mine], [store] = json.loads(mine.stdout), json.loads(store.stdout)
    assert mine["model"] == "mine" and mine["n_x"] == store["n_x"]
    assert (mine["d"], mine["p"]) == pytest.approx((store["d"], store["p"]), abs=1e-12)
    assert out.returncode == 2 and "mine.csv" in out.stderr and "toy/flower/new.png" in out.stderr, out.stderr


BAD_INPUTS = [
    (["run", "resources/stimuli/ieat/insect-flower.yaml", "--model", "nope"],
     "no model 'nope' in the config; configured: minilm, pub, tiny-clip"),
    # a typo of a model's name gets what an adapter's typo gets
    (["run", "resources/stimuli/seat/weat-toy.yaml", "--model", "minlm"],
     "no model 'minlm' in the config (did you mean 'minilm'?); configured: minilm, pub, tiny-clip"),
    (["run", "missing.yaml", "--model", "pub"], "missing.yaml: stimulus file not found"),
    (["run", "resources/stimuli/ieat/insect-flower.yaml", "--model", "tiny-clip"],
     "store results/embeddings/ieat/tiny-clip.h5, not built yet (snakemake --cores all"),
    (["run", "resources/stimuli/ieat/insect-flower.yaml"], "one of the arguments --model --store --vectors is required"),
    (["run", "resources/stimuli/seat/weat-toy.yaml", "--vectors", "nope.csv"], "nope.csv"),
    (["run", "resources/stimuli/ieat/insect-flower.yaml", "--store", "nope.h5"], "nope.h5: no such embedding store"),
    (["show", "t1"], "results/ieat/t1.csv: not built yet"),
    (["show", "t9"], "no table 't9': give a CSV path or one of t1, t2, specificity, mleat/t1, mleat/t2, minilm, mleat/minilm"),
    (["list", "models", "--config", "none.yaml"], "none.yaml: no such config"),
]


@pytest.fixture(scope="module")
def bad_inputs(project):
    """{args: CompletedProcess} of the commands of BAD_INPUTS on the project, run in one interpreter."""
    argvs = [args for args, _ in BAD_INPUTS]
    return dict(zip(map(tuple, argvs), vlbias_several(project, *argvs), strict=True))


@pytest.mark.parametrize("args,message", BAD_INPUTS)
def test_a_bad_input_is_named(bad_inputs, args, message):
    out = bad_inputs[tuple(args)]
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_row_8_each_bad_input_is_one_line_without_a_traceback(project):
    # row 8: OSError / ValueError / UnicodeDecodeError / MemoryError tracebacks; a CSV error of 7 KB naming line 45
    import h5py
    import numpy as np

    from vlbias.io.hdf5 import atomic_hdf5

    (project / "junk.h5").write_text("not hdf5\n")
    # a store whose writer (atomic_hdf5: its checksum intact) put ids that are not UTF-8 in a set
    with h5py.File(project / "results/embeddings/ieat/pub.h5", "r") as src, atomic_hdf5(project / "latin1.h5") as f:
        for name, value in src.attrs.items():
            f.attrs[name] = value
        src.copy(src["toy"], f, "toy")
        n = len(f["toy/insect/ids"])
        del f["toy/insect/ids"]
        f["toy/insect"].create_dataset("ids", data=[b"caf\xe9"] * n, dtype=h5py.string_dtype())
    header = {"descr": "<f8", "fortran_order": False, "shape": (1_000_000, 10_000)}
    with open(project / "huge.npy", "wb") as f:  # a header claiming 80 GB, then 8 bytes
        np.lib.format.write_array_header_1_0(f, header)
        f.write(bytes(8))
    (project / "huge.ids").write_text("a\n")
    (project / "quote.csv").write_text("id,a,b\nw0,1,2\nw1,2,1\n\"w2,1,1\n"
                                       + "".join(f"w{i},{i},1\n" for i in range(3, 300)))
    test, ieat = "resources/stimuli/seat/weat-toy.yaml", "resources/stimuli/ieat/insect-flower.yaml"
    cases = [
        ([ieat, "--store", "junk.h5"], "junk.h5: not an HDF5 file"),
        ([ieat, "--store", "latin1.h5"], "latin1.h5: set 'toy/insect': ids that are not UTF-8 text (byte 0xe9)"),
        ([test, "--store", "results/embeddings/ieat/pub.h5", "--ci-level", "1.5"],
         "key 'stats/ci/level': 1.5 is greater than or equal to the maximum of 1"),
        ([test, "--store", "results/embeddings/ieat/pub.h5", "--ci-n-boot", "1"],
         "key 'stats/ci/n_boot': 1 is less than the minimum of 100"),
        ([test, "--vectors", "huge.npy", "--ids", "huge.ids"], "huge.npy: the header says float64 (1000000, 10000)"),
        ([test, "--vectors", "quote.csv"], "quote.csv: line 4: a quoted field runs on to line 301"),
    ]
    for (args, message), out in zip(cases, vlbias_several(project, *(["run", *args] for args, _ in cases)),
                                    strict=True):
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr)
        assert out.stderr.count("\n") == 1 and len(out.stderr) < 300, out.stderr


def test_a_mistyped_config_is_named_by_its_key(project, tmp_path):
    config = (project / "config/config.yaml").read_text().replace("n_samples: 1000", "n_samples: many")
    (tmp_path / "bad.yaml").write_text(config)
    out = vlbias(project, "list", "models", "--config", str(tmp_path / "bad.yaml"))
    assert out.returncode == 2 and "key 'stats/n_samples': expected integer, got 'many'" in out.stderr


def test_workflow_runs_snakemake_and_names_the_missing_slurm_plugin(project, monkeypatch, capsys):
    out = vlbias(project, "workflow", "--", "-s", str(REPO / "Snakefile"), "results/ieat/t1.csv", "--dry-run",
                 "--quiet", "rules")
    assert out.returncode == 0 and "ieat_table" in out.stdout, out.stderr
    from vlbias import cli
    from vlbias.cli import workflow

    monkeypatch.setattr(workflow, "SLURM_PLUGIN", "vlbias_no_such_plugin")
    assert cli.main(["workflow", "--slurm"]) == 2
    assert "pip install -e '.[slurm]'" in capsys.readouterr().err


def test_a_table_name_two_suites_use_is_said_by_its_suite():
    from pathlib import Path

    import yaml

    from vlbias.cli.show import UsageError, table_path
    from vlbias.config import check_config

    config = check_config(yaml.safe_load((REPO / "config/config.yaml").read_text()),
                          REPO / "workflow/schemas/config.schema.yaml", root=REPO)
    with pytest.raises(UsageError, match="table 'table3' is in several suites: say which, ieat/table3 or grounded/table3"):
        table_path("table3", config)
    assert table_path("grounded/table3", config) == (Path("results/grounded/table3.csv"), "Experiment 1 on Google "
                                                     "Images: do joint embeddings encode social biases? (Ross et al. "
                                                     "2021, Table 3). Protocol 'authors'")
    assert table_path("ieat/table3", config) == (Path("results/ieat/table3.csv"),
                                                 config["ieat"]["tables"]["table3"]["caption"])
    assert table_path("minilm", config)[0] == Path("results/seat/minilm/table.csv")
    # every suite's tables, MLM's too: each vision-language model's, by "<model>/<table>"
    assert table_path("lxmert/bias", config) == (Path("results/mlm/lxmert/bias.csv"), "Bias scores B(E) = "
                                                 "S(E, female) - S(E, male) of the case study: lxmert")
    assert table_path("paper/table5", config)[0] == Path("results/grounded/paper/table5.csv")
