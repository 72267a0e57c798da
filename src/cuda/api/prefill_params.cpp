#include "cuda/api/prefill_params.h"

#include <climits>
#include <string>

#include "core/check.h"
#include "core/plan_encoding.h"
#include "cuda/prefill/sm90/tile_union/geometry.h"

namespace msa::cuda {

void check_cuda_prefill(const AttentionShape& shape, const PrefillArgs& a, std::int64_t total_q) {
  MSA_REQUIRE(std::int64_t(shape.topk) * total_q <= INT32_MAX, "q.shape[0]", std::to_string(total_q),
              "the CUDA sparse prefill needs topk * total_q < 2^31 (32-bit TMA coordinates)");
  const std::int64_t kv_extent = a.kv.k.dim(0);  // pages, or flat rows
  MSA_REQUIRE(kv_extent <= INT32_MAX, "k.shape[0]", std::to_string(kv_extent),
              "the CUDA sparse prefill needs fewer than 2^31 K/V pages or rows (32-bit TMA coordinates)");
}

void set_kv_params(prefill_sm90::AttentionParams& p, const KvCache& kv) {
  const TensorView& k = kv.k;
  p.k = k.data;
  p.v = kv.v.data;
  if (kv.paged()) {
    p.stride_kv_page = k.stride[0];
    p.stride_kv_head = k.stride[1];
    p.stride_kv_token = k.stride[2];
    p.num_pages = k.dim(0);
    p.page_size = static_cast<int>(k.dim(2));
    p.page_table = kv.page_table.ptr<const std::int32_t>();
    p.stride_page_table = kv.page_table.stride[0];
    p.page_table_cols = kv.page_table.dim(1);
  } else {
    p.stride_kv_head = k.stride[1];
    p.stride_kv_token = k.stride[0];
    p.kv_rows = k.dim(0);
    p.cu_seqlens_k = kv.cu_seqlens_k.ptr<const std::int32_t>();
  }
}

prefill_sm90::AttentionParams attention_params(const AttentionShape& shape, const PrefillArgs& a, std::int64_t total_q,
                                               const PrefillWorkspace& w) {
  prefill_sm90::AttentionParams p{};
  p.q = a.q.data;
  p.stride_q_token = a.q.stride[0];
  p.stride_q_head = a.q.stride[1];
  set_kv_params(p, a.kv);
  p.cu_seqlens_q = a.batch.cu_seqlens_q.ptr<const std::int32_t>();
  p.k_len = a.batch.k_len.ptr<const std::int32_t>();
  p.o_partial = w.o_partial;
  p.lse_partial = w.lse_partial;
  p.total_q = total_q;
  p.h_q = shape.h_q;
  p.h_kv = shape.h_kv;
  p.group = shape.group();
  p.topk = shape.topk;
  p.slots = shape.topk;
  p.scale_log2 = shape.softmax_scale() * kLog2e;
  return p;
}

prefill_sm90::TileUnionParams tile_union_params(const prefill_sm90::AttentionParams& attn, const PrefillArgs& a,
                                                std::int64_t batch, int q_per_tile, int group_heads,
                                                const std::int32_t* tile_list, const std::int32_t* tile_count) {
  prefill_sm90::TileUnionParams u{};
  u.attn = attn;
  u.topk = a.topk.ptr<const std::int32_t>();
  u.stride_topk_head = a.topk.stride[0];
  u.stride_topk_token = a.topk.stride[1];
  u.batch = static_cast<int>(batch);
  u.q_per_tile = q_per_tile;
  u.splits = 1;
  u.tiles = std::int64_t(attn.h_kv) * ((attn.total_q + u.q_per_tile - 1) / u.q_per_tile);
  u.tile_list = tile_list;
  u.tile_count = tile_count;
  u.group_heads = group_heads;
  return u;
}

prefill_sm90::BlockMajorParams block_major_params(const prefill_sm90::AttentionParams& attn,
                                                  const PrefillWorkspace& w) {
  prefill_sm90::BlockMajorParams b{};
  b.attn = attn;
  b.work = w.k2q.work;
  b.work_count = w.k2q.work_count;
  b.qsplit = w.k2q.qsplit;
  b.edges_per_head = w.k2q_geo.edges_per_head;
  return b;
}

}  // namespace msa::cuda
