#!/usr/bin/env python3
"""Dense causal attention on the GPU, the reference of perf/targets.md, measured beside
`msa bench prefill` in the same run: PyTorch SDPA with the cuDNN and the flash backends,
Hq=64, Hkv=4 (K/V expanded to the query heads), D=128, BF16, batch 1.
CUDA events, 5 warm-up and 20 timed calls, median. Prints one line per (backend, S)."""
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, warmup=5, reps=20):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def main():
    lengths = [int(s) for s in sys.argv[1:]] or [8192, 32768]
    h_q, h_kv, d = 64, 4, 128
    print(f"dense causal attention, {torch.cuda.get_device_name()}: h_q {h_q}, h_kv {h_kv} (expanded), d {d}, bf16")
    for s in lengths:
        gen = torch.Generator(device="cuda").manual_seed(s)
        q = torch.randn(1, h_q, s, d, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.25
        k = torch.randn(1, h_kv, s, d, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.25
        v = torch.randn(1, h_kv, s, d, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.25
        k = k.repeat_interleave(h_q // h_kv, dim=1)
        v = v.repeat_interleave(h_q // h_kv, dim=1)
        flops = 4.0 * d * h_q * s * (s + 1) / 2  # causal: sum over queries of (pos + 1) keys
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                print(f"dense {name:6s} S={s:6d}  {ms:8.3f} ms  {flops / ms * 1e-9:6.1f} TFLOP/s")
            except RuntimeError as e:
                print(f"dense {name:6s} S={s:6d}  unavailable: {str(e).splitlines()[0]}")
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
