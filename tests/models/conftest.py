import pytest


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The tiny models run on one torch intra-op thread: their matmuls are a few rows, and on a busy
    machine (CI: two pytest workers on two cores) a second OpenMP thread spins waiting for a core the
    other worker holds (test_vilbert's batch test took 42 CPU-s on two threads, 1.4 on one)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
