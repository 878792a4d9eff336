"""The docs' runnable pages, run as a reader would: in a fresh copy of the project (config, resources),
each code block in order: a block titled with a path (```yaml title="resources/..."```) is written
there, a bash block's `vlbias` commands run (each must exit 0), a python block runs in one namespace
per page; a block after `<!-- not run: why -->` is skipped; a block after `<!-- output -->` is what the
block before it prints (its numbers rounded to six digits, as the platform's last digits may differ)."""

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from helpers import REPO

pytestmark = pytest.mark.workflow  # the MiniLM encoder, a tiny image model

FENCE = re.compile(r'(?:<!-- (not run:[^>]*|output) -->\s*)?^```(\w+)(?: title="([^"]+)")?\n(.*?)^```$', re.M | re.S)


def blocks(page):
    """[(language, title, code, what)] of the page's fenced blocks, in order: ``what`` "run", "not run"
    or "output"."""
    text = (REPO / "docs" / page).read_text(encoding="utf-8")
    return [(lang, title, code, "run" if not note else note.split(":")[0]) for note, lang, title, code in
            FENCE.findall(text)]


def rounded(text):
    return re.sub(r"-?\d+\.\d{7,}(e-?\d+)?", lambda m: f"{float(m.group()):.6g}", text)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of the project's config and resources, its cache its own, the repository's weights lock."""
    shutil.copytree(REPO / "resources", tmp_path / "resources")
    (tmp_path / "config").mkdir()
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config |= {"cache": str(tmp_path / "cache"), "weights_lock": str(REPO / config["weights_lock"])}
    (tmp_path / "config/config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_page(page, root):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    namespace, outputs, ran, shown, printed = {}, [], 0, 0, None
    for lang, title, code, what in blocks(page):
        run = what == "run"
        if what == "output":
            assert rounded(printed) == rounded(code), f"{page}: printed\n{printed}\nshown\n{code}"
            shown += 1
        elif title:
            (root / title).parent.mkdir(parents=True, exist_ok=True)
            (root / title).write_text(code, encoding="utf-8")
        elif run and lang == "bash":
            for line in code.splitlines():
                command = line.split("#")[0].split()
                if command and command[0] == "vlbias":
                    out = subprocess.run([sys.executable, "-m", "vlbias", *command[1:]], cwd=root, env=env,
                                         capture_output=True, text=True, timeout=600, check=False)
                    assert out.returncode == 0, f"{page}: {line}\n{out.stderr}"
                    outputs.append(out.stdout)
                    printed = out.stdout
                    ran += 1
        elif run and lang == "python":
            with contextlib.redirect_stdout(io.StringIO()) as stdout:
                exec(compile(code, f"{page} (python block)", "exec"), namespace)  # noqa: S102
            printed = stdout.getvalue()
            ran += 1
    return namespace, outputs, ran, shown


def test_the_tutorial_runs_and_its_steps_agree(project):
    namespace, outputs, ran, shown = run_page("tutorial.md", project)
    assert ran == 4 and shown == 4  # two commands, two python blocks, what each prints
    # step 1's command and step 4's query: the same test, the same row
    md, df = outputs[0], namespace["df"]
    assert f"{df.iloc[0]['d']:.2f}" in md and df.iloc[0]["status"] == "ok" and df.iloc[0]["exact"]
    assert (project / "resources/stimuli/seat/my-science-arts.yaml").is_file()
    flowers = outputs[1]
    assert "my-vectors" in flowers and ",ok," in flowers


def test_the_api_page_runs(project):
    namespace, _, ran, _ = run_page("api.md", project)
    assert ran == 2
    assert namespace["df"].iloc[0]["model"] == "my-minilm"
