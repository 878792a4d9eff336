import os
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from helpers import REPO

# torch's OpenMP threads sleep when idle instead of spinning: the tests run beside each other (more
# pytest-xdist workers than cores, each starting Snakemake jobs), and a spinning thread burns the
# core another process waits for (test_vilbert's batch test: 30.8 CPU-s spinning, 2.6 sleeping, on a
# loaded machine). Set before any test module imports torch (libgomp reads it once, when torch loads it);
# the workers' subprocesses inherit it; it changes no result
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def mirror():
    """The local data mirror (VLBIAS_MIRROR, else ../shared/data beside the repository)."""
    path = Path(os.environ.get("VLBIAS_MIRROR", REPO.parent / "shared" / "data"))
    if not (path / "ieat").is_dir():
        pytest.skip(f"needs the local data mirror of the upstream repositories; {path} is absent "
                    "(set VLBIAS_MIRROR to a copy laid out like shared/data)")
    return path


@pytest.fixture(scope="session")
def built_project(tmp_path_factory):
    """``make_project``'s project with its default target built (helpers.project.build_default), once per
    session for all the modules that read it (test_workflow, the CLI); read it only: a module works on
    its own copy (helpers.project.copy_project)."""
    from helpers.project import build_default, build_once

    return build_once(tmp_path_factory, "default", build_default)


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium (tests/browser.py) to render HTML as a reader sees it; skips without one."""
    from browser import Browser

    found = Browser.find()
    if found is None:
        pytest.skip("needs a headless Chromium (Debian: apt-get install -y chromium)")
    return found


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Each test, and the module and session fixtures its setup builds, on one torch intra-op thread
    (a test that sets threads, as an encoder's ``threads`` does, keeps them until the next test): the
    tiny models gain nothing from a second thread, which on CI (three workers on two cores) waits for a
    core another worker holds (test_vilbert's batch test: 42 CPU-s on two threads, 1.4 on one; the
    grounded embedding tests 17 and 5). Only where a test module imported torch."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    # tests never reach a model hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    # the loopback test server must be reached directly whatever proxy the environment names
    monkeypatch.setenv("no_proxy", "*")


@pytest.fixture
def hub(monkeypatch):
    """The loopback Hugging Face hub (tests/hub.py), with huggingface_hub pointed at it and online
    (the ``offline`` fixture turns it offline)."""
    from huggingface_hub import constants

    from hub import Hub

    server = Hub().start()
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # restored after localize sets them
        monkeypatch.setenv(key, "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    yield server
    server.stop()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the http.server API
        path = urlsplit(self.path).path.lstrip("/")
        name = path if path in self.server.routes else path.rsplit("/", 1)[-1]
        self.server.requests[name] += 1
        route = self.server.routes.get(name)
        if route is None:
            self.reply(404, b"not here")
        elif callable(route):
            route(self)
        elif isinstance(route, tuple):
            self.reply(*route)
        else:
            self.reply(200, route)

    def reply(self, code, body, headers=()):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class LoopbackServer(ThreadingHTTPServer):
    """HTTP on 127.0.0.1. ``routes`` maps a request's path (without the leading "/"), else its last
    path component, to its answer: bytes (200 with that body), a tuple (code, body[, headers]) or a
    callable taking the request handler (which has ``reply(code, body, headers=())``); anything else
    is a 404. ``requests`` counts the requests per route key (the last component when none matched)."""

    block_on_close = False  # do not wait for a deliberately slow handler on shutdown

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes, self.requests = {}, Counter()

    def url(self, path):
        return f"http://127.0.0.1:{self.server_address[1]}/{path}"

    def handle_error(self, request, client_address):
        pass  # a client that hung up on a slow endpoint: expected


@pytest.fixture(scope="module")
def http_server():
    """A :class:`LoopbackServer` for one test module; the module adds its ``routes``."""
    srv = LoopbackServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(5)



# The modules that take longest, longest first: the ten that run the Snakefile as `pytest --durations`
# timed them (setup and calls summed per module: the grounded pipeline 2,260 s, test_workflow 2,020,
# iEAT 700, the zoo 520, MLM 470, the CLI 380, on a machine loaded 7-fold), then the
# bottom-up detector and the property and coverage simulations. With `--dist loadfile` (make test)
# each module runs whole on one worker; pytest-xdist would start the modules with the most tests first (the MLM and regions
# workflows, 5 and 3 tests, among the last), so one long module ran alone at the end. test_workflow
# builds the session's ``built_project`` (it comes before the CLI, which copies it and builds none).
SLOWEST_FIRST = ["test_grounded_pipeline.py", "test_workflow.py", "test_ieat_workflow.py", "test_mlm_workflow.py",
                 "test_zoo_workflow.py", "test_cli.py", "test_regions_workflow.py", "test_grounded_workflow.py",
                 "test_weights.py", "test_sources.py", "test_regions_tsv.py", "test_bua.py", "test_hostile_inputs.py",
                 "test_bootstrap.py"]


def pytest_collection_modifyitems(config, items):
    """Run the modules in SLOWEST_FIRST's order, then any other module that runs the Snakefile (marker
    ``workflow``), then the rest as collected; each module's tests stay in their order."""
    workflow = {item.path for item in items if item.get_closest_marker("workflow")}

    def rank(item):
        name = item.path.name
        return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST) + (item.path not in workflow)

    items.sort(key=rank)  # stable: the order of collection within a rank


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (make test): one worker more than the cores this process may use. The workers wait on
    their Snakemake runs' jobs and on the SLURM scheduler; with one worker per core a core sat idle
    meanwhile (CI, 2 cores: 1.78 busy on average)."""
    return len(os.sched_getaffinity(0)) + 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile hands out the modules in the order above, not pytest-xdist's default (the
    modules with the most tests first, whatever their length)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False
    return LoadFileScheduling(config, log)
