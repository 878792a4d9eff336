import pytest


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one intra-op thread for a module's in-process models, as the workflow's embedding jobs
    run them (grounded/experiments/threads): the tiny models gain nothing from a second thread, and while
    the other core is busy (CI's other worker, a Snakemake job) the idle one spins, burning CPU for
    nothing (the embedding tests took 17 CPU-s on two threads, 5 on one). Restored after the module."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
