#!/usr/bin/env python3
"""Writes the seed corpus of msa_fuzz_api (tests/fuzz/corpus/), one file per operator branch.

Input layout (tests/fuzz/fuzz_api.cpp; struct Header in fuzz_input.h): a 20-byte header (HEADER),
then per-request lengths (prefill, indexer, top-k, plan: u8 q_len, u16 extra k_len; decode:
u16 extra seq_len), then mutations (u8 target, u8 field, hostile value[, hostile value]).

    python3 tests/fuzz/make_corpus.py [out_dir]
"""
import os
import struct
import sys

HEADER = ["op", "batch", "h_kv", "group", "topk", "page", "layout", "dtype", "values", "sinks",
          "outputs", "selection", "strict", "plant", "variant", "aux"]  # then u32 seed
OPS = {"prefill": 0, "decode": 1, "indexer": 2, "topk": 3, "combine": 4, "plan": 5, "sizes": 6,
       "tensor_view": 7}
PAGE = {16: 0, 32: 1, 64: 2, 128: 3, "flat": 4}
# Tensor ids (enum Tid) and the two extra mutation targets.
TID = {n: i for i, n in enumerate(
    ["q", "k", "v", "page_table", "cu_seqlens_k", "cu_seqlens_q", "k_len", "topk", "sinks", "out",
     "lse", "scores", "index_q", "index_k", "o_partial", "lse_partial", "split_counts", "seq_len",
     "topk_out", "cu_seqlens_q2", "k_len2", "topk2"])}
SHAPE, OPTIONS = len(TID), len(TID) + 1
# Tensor mutation kinds (low nibble of the field byte); bits 4-5 pick the dim.
PRESENT, RANK, EXTENT, STRIDE, DTYPE, DEVICE, MISALIGN, NULL, ELEMENT = range(9)
# hostile_int's table, in order.
TABLE = [0, 1, -1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 127, 128, 129, 255, 256, 4096,
         1 << 24, (1 << 24) + 1, 2**31 - 1, 2**31 - 2, 2**31 - 128, 2**31 - 129, -2**31,
         -2**31 + 1, 1 << 31, 1 << 32, (1 << 32) + 1, 1 << 40, 1 << 62, 2**63 - 1, -2**63, -2, -8,
         -128, -2**31 - 1, 1 << 20, (1 << 27) + 1, 1 << 28]


def hv(v):
    """A hostile_int encoding of v."""
    if v in TABLE:
        return bytes([TABLE.index(v)])
    if -2**15 <= v < 2**15:
        return bytes([100]) + struct.pack("<h", v)
    if -2**31 <= v < 2**31:
        return bytes([210]) + struct.pack("<i", v)
    return bytes([240]) + struct.pack("<q", v)


def header(op, seed=1, **f):
    vals = {k: 0 for k in HEADER}
    vals["op"] = OPS[op]
    for k, v in f.items():
        vals["page" if k == "page_size" else k] = PAGE[v] if k == "page_size" else v
    return bytes(vals[k] & 0xff for k in HEADER) + struct.pack("<I", seed)


def lens(*reqs):
    """(q_len, k_len) pairs -> u8 q_len, u16 extra (k_len = min(700, q_len + extra))."""
    return b"".join(struct.pack("<BH", q, k - q) for q, k in reqs)


def tmut(tensor, kind, v, dim=0, v2=None):
    out = bytes([TID[tensor], kind | (dim << 4)]) + hv(v)
    return out + (hv(v2) if kind == ELEMENT else b"")


def smut(kind, v, pre=False):
    return bytes([SHAPE, kind | (0x80 if pre else 0)]) + hv(v)


def omut(kind, v):
    return bytes([OPTIONS, kind]) + hv(v)


BASE = dict(batch=1, h_kv=1, group=3, topk=3, page_size=32)  # B 2, h_kv 2, G 4, topk 4
REQS = lens((5, 300), (3, 120))

SEEDS = {
    # ---- sparse prefill --------------------------------------------------------------------
    "prefill_paged32_sinks_strict": header("prefill", **BASE, sinks=1, strict=1) + REQS,
    "prefill_flat_gaps_fp16_padded": header("prefill", **{**BASE, "page_size": "flat"}, dtype=1,
                                            layout=2 | 8 | 16 | 32 | 64, outputs=8, plant=3) + REQS,
    "prefill_token_major128_hostile_ids": header("prefill", **{**BASE, "page_size": 128, "batch": 2}, layout=1,
                                                 selection=1, outputs=2 | 4, plant=1) + lens((9, 700), (0, 40), (1, 1)),
    "prefill_g16_topk32_dense_no_lse": header("prefill", batch=0, h_kv=0, group=15, topk=31,
                                             page_size=16, selection=3, outputs=1) + lens((3, 520)),
    "prefill_all_minus1_dups": header("prefill", **BASE, selection=2, sinks=6) + lens((4, 260), (2, 2)),
    "prefill_run_other_cu_seqlens": header("prefill", **BASE, variant=1) + REQS,
    "prefill_run_other_k_len": header("prefill", **BASE, variant=2, seed=7) + REQS,
    "prefill_run_other_topk": header("prefill", **BASE, variant=3, selection=0) + REQS,
    "prefill_run_other_batch": header("prefill", **BASE, variant=5, aux=1) + REQS,
    "prefill_workspace_exact": header("prefill", **BASE, variant=6) + REQS,
    "prefill_workspace_misaligned": header("prefill", **BASE, variant=7, aux=2) + REQS,
    "prefill_workspace_small": header("prefill", **BASE, variant=8, aux=3) + REQS,
    "prefill_extreme_values_nan_sinks": header("prefill", **BASE, values=1, sinks=2) + REQS,
    "prefill_moved_from_run": header("prefill", **BASE, variant=13, aux=0) + REQS,
    "prefill_move_assigned": header("prefill", **BASE, variant=14, aux=4) + REQS,
    "prefill_plan_snapshot_checked": header("prefill", **BASE, variant=15, selection=1) + REQS,
    "prefill_free_function": header("prefill", **BASE, variant=10, sinks=3) + REQS,
    "prefill_k_len_negative_stride": header("prefill", **BASE) + REQS + tmut("k_len", STRIDE, -1),
    "prefill_q_rank_1000": header("prefill", **BASE) + REQS + tmut("q", RANK, 7),
    "prefill_backend7_path9": header("prefill", **BASE) + REQS + omut(0, 7) + omut(1, 9),
    "prefill_k_len_near_int_max": header("prefill", **{**BASE, "page_size": "flat", "batch": 0}, layout=4)
    + lens((1, 130)) + tmut("k", EXTENT, 2**31 - 1) + tmut("v", EXTENT, 2**31 - 1)
    + tmut("k_len", ELEMENT, 0, v2=2**31 - 1) + tmut("cu_seqlens_k", ELEMENT, 1, v2=2**31 - 1),
    "prefill_d64_group17": header("prefill", **BASE) + REQS + smut(9, 0, pre=True) + smut(5, 17),
    # ---- sparse decode ---------------------------------------------------------------------
    "decode_q4_query_major": header("decode", **BASE, aux=3, sinks=1) + struct.pack("<HH", 296, 77),
    "decode_q16_head_major_flat": header("decode", **{**BASE, "page_size": "flat"}, aux=15,
                                         variant=8, plant=2) + struct.pack("<HH", 600, 3),
    "decode_free_function": header("decode", **BASE, variant=1, aux=1) + struct.pack("<HH", 5, 130),
    "decode_plan_other_batch": header("decode", **BASE, variant=6, aux=3) + struct.pack("<HH", 200, 9),
    "decode_plan_short_max_seq_len": header("decode", **BASE, variant=7 | 8, aux=1) + struct.pack("<HH", 650, 20),
    "decode_moved_from": header("decode", **BASE, variant=4) + struct.pack("<HH", 5, 130),
    "decode_seq_len_stride0_huge_batch": header("decode", batch=0, aux=15)
    + struct.pack("<H", 10) + tmut("seq_len", EXTENT, 1 << 28) + tmut("seq_len", STRIDE, 0),
    # ---- indexer, top-k, combine -----------------------------------------------------------
    "indexer_paged16": header("indexer", **{**BASE, "page_size": 16}, aux=1) + REQS,
    "indexer_flat_scale_moved_from": header("indexer", **{**BASE, "page_size": "flat"}, variant=4 | 3 | 8,
                                            plant=1) + REQS,
    "indexer_h_i_huge_empty": header("indexer", **{**BASE, "batch": 0}) + lens((0, 10)) + smut(6, 1 << 24)
    + tmut("index_q", EXTENT, 1 << 24, dim=1) + tmut("scores", EXTENT, 1 << 24),
    "topk_ties": header("topk", **{**BASE, "topk": 5}, values=3) + lens((7, 700), (2, 300)),
    "topk_nan_scores_moved_from": header("topk", **BASE, values=1, variant=8 | 2, aux=3) + REQS,
    "combine_fp32_sinks_plant": header("combine", **BASE, aux=5, sinks=1, plant=1),
    "combine_bf16_partials": header("combine", **BASE, aux=8, dtype=2, layout=8 | 16 | 32),
    "combine_moved_from": header("combine", **BASE, aux=3, variant=8),
    # ---- plan, sizes, views ----------------------------------------------------------------
    "plan_q_per_item_1": header("plan", **BASE, variant=1 | 8, aux=3) + REQS,
    "plan_strict_contract": header("plan", **BASE, variant=7, strict=1) + lens((40, 700), (8, 8)),
    "sizes_hostile": header("sizes", variant=4) + hv(1 << 40) + hv(2**31 - 1) + hv(2**63 - 1) + hv(0)
    + hv(1 << 40) + hv(1 << 40) + hv(2**63 - 1) + hv(64),
    "sizes_shape": header("sizes", variant=2) + hv(64) + hv(4) + hv(128) + hv(16) + hv(1) + hv(1) + hv(8) + hv(300) + hv(64),
    "tensor_view_rank5": header("tensor_view", aux=5) + b"".join(hv(2) for _ in range(12)),
    "tensor_view_rank1000_huge": header("tensor_view", aux=3, variant=2, topk=2)
    + b"".join(hv(1 << 40) for _ in range(12)),
}


def main():
    for name, data in SEEDS.items():
        op = data[0]
        if op in (0, 2, 3, 5):  # prefill, indexer, top-k, plan: 3 bytes per request
            assert len(data) >= 20 + 3 * (1 + data[1] % 4), name
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(SEEDS)} seeds in {out}")


if __name__ == "__main__":
    main()
