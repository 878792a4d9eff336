"""benchmarks/grounded_embed.py: the grounded embedding stage beside the model alone, at tiny size on a
mini-job of one image per image set (the benchmark's figures come from its own runs, not from here)."""

import json
import time

import pytest
import torch
import yaml
from helpers import REPO, plain_module


@pytest.fixture(scope="module")
def bench():
    return plain_module("grounded_embed_benchmark", REPO / "benchmarks/grounded_embed.py")


def test_every_grounded_family_of_the_config_has_a_tiny_and_a_base_model(bench):
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    families = {m["adapter"] for m in config["grounded"]["models"].values()}
    assert set(bench.FAMILIES) == families >= {"visualbert", "lxmert", "vilbert", "vlbert", "blip", "flava", "vilt",
                                               "bridgetower"}
    assert set(bench.TINY) >= families and set(bench.BASE) >= families
    assert all(bench.TINY[f]["adapter"] == f for f in families)


class Sleeper(torch.nn.Module):
    def __init__(self, inner=None):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        time.sleep(0.05)
        return self.inner(x) if self.inner is not None else x


def test_the_clock_times_each_outermost_module_call_once(bench):
    outer, alone = Sleeper(Sleeper()), Sleeper()
    outer(torch.zeros(1))  # before the clock: not counted
    with bench.ModelClock() as clock:
        outer(torch.zeros(1))  # 0.1 s, its inner call inside it
        alone(torch.zeros(1))  # 0.05 s
    alone(torch.zeros(1))  # after: not counted
    assert clock.calls == 2
    assert 0.15 <= clock.seconds < 0.29  # counted twice, the inner call would add 0.05 s


def test_stage_and_model_alone_of_a_region_and_a_pixel_family(bench, tmp_path, capsys):
    out = tmp_path / "bench.json"
    report = bench.main(["--only", "embed", "--sizes", "tiny", "--images", "6", "--families", "lxmert,flava",
                         "--threads", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(report, default=str))
    rows = {r["family"]: r for r in report["rows"]}
    assert set(rows) == {"lxmert", "flava"} and report["loadavg_start"] and report["loadavg_end"]
    for row in rows.values():
        assert row["status"] == "ok" and (row["size"], row["precision"], row["batch"]) == ("tiny", "fp32", 32)
        assert row["threads"] == 1 and row["images"] == 6 and row["loadavg_start"] and row["loadavg_end"]
        # the mini-job: each of the 6 images read by many pairs (W, S, C, T and I of its captions)
        assert row["pairs"] > 10 * row["images"] and row["pairs_per_image"] == row["pairs"] / 6
        assert 0 < row["model_s"] <= row["stage_s"] and row["module_calls"] > 0
        assert row["build_s"] > 0 and row["warm_up_s"] > 0 and row["parameters"] > 0
        assert row["stage_pairs_s"] == pytest.approx(row["pairs"] / row["stage_s"])
        assert row["model_pairs_s"] == pytest.approx(row["pairs"] / row["model_s"])
        assert row["overhead"] == pytest.approx(1 - row["model_s"] / row["stage_s"])
        assert row["host_ms_per_pair"] == pytest.approx(1000 * (row["stage_s"] - row["model_s"]) / row["pairs"])
    # FLAVA's text, image and multimodal encoders are separate calls; LXMERT's model one per batch
    assert rows["flava"]["module_calls"] > rows["lxmert"]["module_calls"]
    printed = capsys.readouterr().out
    assert "lxmert      tiny fp32" in printed and "flava       tiny fp32" in printed
