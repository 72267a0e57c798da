"""msa.TopK on the CUDA backend with PyTorch tensors (skipped without PyTorch, a GPU or a CUDA
build), against the NumPy oracle of test_selection_cpu.py: ties, -inf and NaN scores, the
n <= topk shortcut, rows of thousands of blocks, and the query-major output seen through a
transposed view."""

import numpy as np
import pytest

import msa
from test_selection_cpu import batch, reference_topk

torch = pytest.importorskip("torch")
if not (torch.cuda.is_available() and msa.cuda_available()):
    pytest.skip("no CUDA device or no CUDA build", allow_module_level=True)

DEV = "cuda"
REQUESTS = [(40, 5000), (3, 3), (0, 90), (130, 1100), (2, 2049), (7, 600000)]


def scores_case(seed, h, total_q, cols):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 6, size=(h, total_q, cols)).astype(np.float32)
    scores[rng.random(scores.shape) < 0.05] = -np.inf
    scores[rng.random(scores.shape) < 0.03] = np.nan
    return scores


@pytest.mark.parametrize("topk", [1, 5, 16, 32])
def test_topk_matches_the_oracle(topk):
    cu_q, _, k_len = batch(REQUESTS)
    h, cols = 2, max(kl for _, kl in REQUESTS) // 128 + 1
    scores = scores_case(topk, h, int(cu_q[-1]), cols)
    out = torch.full((h, int(cu_q[-1]), topk), 7777, dtype=torch.int32, device=DEV)
    op = msa.TopK(topk, backend="cuda")
    cu_d, kl_d = torch.from_numpy(cu_q).to(DEV), torch.from_numpy(k_len).to(DEV)
    op.plan(cu_d, kl_d)
    op.run(torch.from_numpy(scores).to(DEV), out, cu_d, kl_d)
    torch.cuda.synchronize()
    assert np.array_equal(out.cpu().numpy(), reference_topk(scores, REQUESTS, topk))


def test_topk_query_major_output():
    cu_q, _, k_len = batch(REQUESTS)
    h, cols, topk = 4, max(kl for _, kl in REQUESTS) // 128 + 1, 16
    scores = scores_case(3, h, int(cu_q[-1]), cols)
    qm = torch.full((int(cu_q[-1]), h, topk), -5, dtype=torch.int32, device=DEV)  # [total_q, h, topk]
    cu_d, kl_d = torch.from_numpy(cu_q).to(DEV), torch.from_numpy(k_len).to(DEV)
    msa.TopK(topk, backend="cuda", strict=True).run(torch.from_numpy(scores).to(DEV), qm.transpose(0, 1), cu_d, kl_d)
    torch.cuda.synchronize()
    assert np.array_equal(qm.transpose(0, 1).cpu().numpy(), reference_topk(scores, REQUESTS, topk))
