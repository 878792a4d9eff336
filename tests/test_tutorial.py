"""The docs' runnable pages, run as a reader would: in a fresh copy of the project (config, resources),
each code block in order: a block titled with a path (```yaml title="resources/..."```) is written
there, a bash block's `vlbias` commands run (each must exit 0), a python block runs in one namespace
per page; a block after `<!-- not run: why -->` is skipped."""

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from helpers import REPO

pytestmark = pytest.mark.workflow  # the MiniLM encoder, a tiny image model

FENCE = re.compile(r'(<!-- not run:[^>]*-->\s*)?^```(\w+)(?: title="([^"]+)")?\n(.*?)^```$', re.M | re.S)


def blocks(page):
    """[(language, title, code, run?)] of the page's fenced blocks, in order."""
    text = (REPO / "docs" / page).read_text(encoding="utf-8")
    return [(lang, title, code, not skip) for skip, lang, title, code in FENCE.findall(text)]


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
    namespace, outputs, ran = {}, [], 0
    for lang, title, code, run in blocks(page):
        if title:
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
                    ran += 1
        elif run and lang == "python":
            exec(compile(code, f"{page} (python block)", "exec"), namespace)  # noqa: S102
            ran += 1
    return namespace, outputs, ran


def test_the_tutorial_runs_and_its_steps_agree(project):
    namespace, outputs, ran = run_page("tutorial.md", project)
    assert ran == 4  # two commands, two python blocks
    # step 1's command and step 4's query: the same test, the same row
    md, df = outputs[0], namespace["df"]
    assert f"{df.iloc[0]['d']:.2f}" in md and df.iloc[0]["status"] == "ok" and df.iloc[0]["exact"]
    assert (project / "resources/stimuli/seat/my-science-arts.yaml").is_file()
    flowers = outputs[1]
    assert "my-vectors" in flowers and ",ok," in flowers


def test_the_api_page_runs(project):
    namespace, _, ran = run_page("api.md", project)
    assert ran == 2
    assert namespace["df"].iloc[0]["model"] == "my-minilm"
