// The CUDA sparse prefill operator: validates once, plans on the device (tile routing and the
// k2q plan), and runs the two sm_90a kernels and the combine through the one (dtype, head dim)
// dispatch. Launchers only assert.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>

#include "core/batch.h"
#include "core/check.h"
#include "core/impl.h"
#include "core/k2q_host.h"
#include "core/plan_inputs.h"
#include "core/tile_route.h"
#include "core/validate.h"
#include "cuda/api/decode_params.h"
#include "cuda/api/device.h"
#include "cuda/api/dispatch.h"
#include "cuda/api/host_mirrors.h"
#include "cuda/api/prefill_params.h"
#include "cuda/api/prefill_route.h"
#include "cuda/api/prefill_workspace.h"
#include "cuda/combine/launch.h"
#include "cuda/common/check.h"
#include "cuda/plan/tile_route.h"
#include "cuda/prefill/sm90/common/tma.h"
#include "cuda/prefill/sm90/launch.h"

namespace msa::cuda {

namespace {

// The head dims of the built instances (topk, group and the rest are validate_shape's).
void check_prefill_shape(const AttentionShape& shape) {
  MSA_REQUIRE(prefill_head_dim_built(shape.d), "shape.d", std::to_string(shape.d),
              "the CUDA sparse prefill supports head dim 128 only (for now)");
}

class PrefillCuda final : public SparsePrefill::Impl {
 public:
  // The planner's one-time device setup (its grid path's kernel attribute and occupancy) here,
  // so that a plan() first called inside a graph capture makes no such call.
  PrefillCuda() { k2q_device_prepare(); }
  PrefillCuda(const PrefillCuda&) = delete;
  PrefillCuda& operator=(const PrefillCuda&) = delete;

  void set_workspace(void* data, std::size_t bytes) override {
    scratch_.borrow(data, bytes);
    planned_ = false;  // the plan lived in the previous workspace
  }

  void plan(const VarlenBatch& batch, const TensorView& topk, cudaStream_t stream) override {
    plan_bounded(batch, topk, -1, stream);
  }

  // max_k_len < 0: no bound given (only CPU batch tensors can be planned then).
  void plan_bounded(const VarlenBatch& batch, const TensorView& topk, std::int64_t max_k_len,
                    cudaStream_t stream) override {
    planned_ = false;
    check_prefill_shape(shape);
    check_int32_vector(batch.k_len, "k_len", batch.k_len.device);
    check_int32_vector(batch.cu_seqlens_q, "cu_seqlens_q", batch.cu_seqlens_q.device);
    const Device batch_device = batch.k_len.device;
    MSA_REQUIRE(batch.cu_seqlens_q.device == batch_device, "cu_seqlens_q.device", to_string(batch.cu_seqlens_q.device),
                "must be where k_len is (" + to_string(batch_device) + ")");
    const std::int64_t b_count = batch.k_len.dim(0);
    check_dim(batch.cu_seqlens_q, "cu_seqlens_q", 0, b_count + 1);
    check_present(topk, "topk");
    check_rank(topk, "topk", 3);
    const std::int64_t total_q = topk.dim(1);

    BatchInfo info;
    const bool host_batch = batch_device == Device::kCpu;
    if (host_batch) {
      info = read_batch(batch);  // values checked here
      MSA_REQUIRE(info.total_q == total_q, "topk.shape[1]", std::to_string(total_q),
                  "must equal cu_seqlens_q[B] = " + std::to_string(info.total_q));
      max_k_len = std::max(max_k_len, info.max_k_len);
    } else {
      MSA_REQUIRE(max_k_len >= 0, "max_k_len", "unknown",
                  "device-resident cu_seqlens_q / k_len need plan(batch, topk, max_k_len, stream)");
      MSA_REQUIRE(contiguous_vector(batch.k_len), "k_len.stride[0]", std::to_string(batch.k_len.stride[0]),
                  "device batch tensors must be contiguous");
      MSA_REQUIRE(contiguous_vector(batch.cu_seqlens_q), "cu_seqlens_q.stride[0]",
                  std::to_string(batch.cu_seqlens_q.stride[0]), "device batch tensors must be contiguous");
      // cu_seqlens_q[B] = total_q cannot be read here; with no request it can only be 0.
      MSA_REQUIRE(b_count > 0 || total_q == 0, "topk.shape[1]", std::to_string(total_q),
                  "must be 0 for an empty batch (k_len.shape[0] = 0)");
      info.batch = b_count;
      info.total_q = total_q;
    }
    const bool host_topk = topk.device == Device::kCpu;
    validate_topk(topk, info, shape.h_kv, shape.topk, options.strict && host_batch && host_topk, topk.device);
    // Strict mode checks device-resident batch and top-k values on the host: one synchronisation
    // (strict is opt-in, and such a plan() cannot be captured in a graph).
    if (options.strict && (!host_batch || !host_topk))
      strict_plan_check(batch, topk, host_batch ? -1 : max_k_len, stream);

    const ProblemSize problem{b_count, total_q, max_k_len};
    const std::size_t bytes = prefill_workspace(shape, problem, options, nullptr).bytes;
    ws_ = prefill_workspace(shape, problem, options, scratch_.get(bytes));

    K2qDeviceInputs in{};
    if (host_batch) {
      copy_to_device(ws_.cu_seqlens_q, info.cu_q.data(), info.cu_q.size() * sizeof(std::int32_t), stream);
      copy_to_device(ws_.k_len, info.k_len.data(), info.k_len.size() * sizeof(std::int32_t), stream);
      in.cu_seqlens_q = ws_.cu_seqlens_q;
      in.k_len = ws_.k_len;
    } else {
      in.cu_seqlens_q = batch.cu_seqlens_q.ptr<const std::int32_t>();
      in.k_len = batch.k_len.ptr<const std::int32_t>();
    }
    if (host_topk) {
      stage_int32_3d(topk, ws_.topk, stream);
      in.topk = ws_.topk;
      in.stride_topk_head = total_q * shape.topk;
      in.stride_topk_token = shape.topk;
    } else {
      in.topk = topk.ptr<const std::int32_t>();
      in.stride_topk_head = topk.stride[0];
      in.stride_topk_token = topk.stride[1];
    }
    // The route (prefill_route.h). Every tile on the tile-union kernel needs no device plan:
    // PrefillPath::kTileUnion, or kAuto where the routing's cost model finds the union kernel on
    // every tile, each union at its bound, no dearer than the routed call (union_only_batch;
    // such plan-free tiles may hold more queries than a routed call's at G <= 3), one request of
    // at most 16 queries (a decode step of Q = total_q on the same tensors: head-major top-k,
    // k_len as seq_len), or a small call split like the decode (prefill_split_union: a few
    // queries of several requests; prefill_split_wide: up to 1024 queries where that is expected
    // to cost less than the plan-free tiles or the plan and block-major run otherwise taken: the
    // union kernel's routed tiles, each split over its union into the partials' slots, and the
    // combine). Otherwise kAuto routes each tile to the cheaper kernel before the plan is built,
    // so that the k2q plan leaves the union tiles' rows out. The tile-union kernel reads top-k
    // rows with a contiguous last dim; otherwise every tile stays block-major.
    const bool union_readable = host_topk || topk.stride[2] == 1;
    const PrefillRouteChoice route =
        choose_prefill_route(shape, options.prefill_path, union_readable, host_batch ? info.cu_q.data() : nullptr,
                             host_batch ? info.k_len.data() : nullptr, b_count, total_q, max_k_len);
    decode_route_ = route.route == PrefillRoute::kDecode;
    split_union_ = route.route == PrefillRoute::kSplit;
    union_only_ = route.route == PrefillRoute::kPlanFree;
    routed_ = route.route == PrefillRoute::kRouted;
    union_q_per_tile_ = route.q_per_tile;
    union_splits_ = route.splits;
    if (decode_route_) {
      decode_geo_ = decode_geometry(shape, 1, static_cast<int>(total_q), max_k_len);
      decode_ws_ = decode_workspace(shape, decode_geo_, ws_.decode);
      MSA_ASSERT(decode_ws_.bytes <= ws_.decode_bytes);
    }
    // plan_snapshot() of a plan that built nothing rebuilds it on the host from these.
    planned_topk_ = TensorView::strided(const_cast<std::int32_t*>(in.topk), DType::kInt32,
                                        {shape.h_kv, total_q, shape.topk},
                                        {in.stride_topk_head, in.stride_topk_token, host_topk ? 1 : topk.stride[2]},
                                        Device::kCuda);
    planned_cu_ = TensorView::contiguous(const_cast<std::int32_t*>(in.cu_seqlens_q), DType::kInt32, {b_count + 1},
                                         Device::kCuda);
    planned_k_len_ =
        TensorView::contiguous(const_cast<std::int32_t*>(in.k_len), DType::kInt32, {b_count}, Device::kCuda);
    TileRouteParams rp{};
    if (routed_) {
      rp.ids = in.topk;
      rp.stride_topk_head = in.stride_topk_head;
      rp.stride_topk_token = in.stride_topk_token;
      rp.cu_seqlens_q = in.cu_seqlens_q;
      rp.k_len = in.k_len;
      rp.batch = static_cast<int>(b_count);
      rp.h_kv = shape.h_kv;
      rp.total_q = total_q;
      rp.topk = shape.topk;
      rp.q_per_tile = tile_union_queries_per_tile(shape.group(), shape.topk);
      rp.group = shape.group();
      rp.union_tile = ws_.union_tile;
      rp.union_list = ws_.union_list;
      rp.union_count = ws_.union_count;
      rp.combine_list = ws_.combine_list;
      rp.combine_count = ws_.combine_count;
      // Calls of up to kRouteCallMaxTiles tiles route their candidates only where the call
      // gains by them (route_call_pays; the planner decides it on the device).
      if (route_call_applies(tile_route_tiles(rp.h_kv, total_q, rp.q_per_tile))) {
        rp.call_slots = ws_.route_slots;
        rp.call_counters = ws_.route_counters;
      }
      in.route = &rp;  // the planner routes first (in its own head CTAs on the small path)
    }
    if (!union_only_ && !decode_route_ && !split_union_) build_k2q_device(ws_.k2q_geo, in, ws_.k2q, stream);

    if (sm_count_ == 0) sm_count_ = current_sm_count();
    if (l2_bytes_ == 0) l2_bytes_ = current_l2_bytes();
    std::int64_t kv_tokens = 0;  // per KV head (a device batch: B x its bound)
    if (host_batch)
      for (const std::int32_t k : info.k_len) kv_tokens += std::max<std::int32_t>(k, 0);
    else
      kv_tokens = b_count * std::max<std::int64_t>(max_k_len, 0);
    // A plan-free launch of wide tiles walks them over groups of KV heads whose K/V fits the
    // L2 cache.
    union_group_heads_ = shape.h_kv;
    if (union_only_ && total_q > 0 && union_q_per_tile_ > kTileUnionNarrowQueries)
      union_group_heads_ = union_group_heads(kv_tokens * shape.d * 2 * 2, tiles_per_head(total_q, union_q_per_tile_),
                                             shape.h_kv, sm_count_, l2_bytes_);
    // The block-major kernel's K/V L2 priority (block_major_kv_once); in double, so that no
    // bound a device batch gives can overflow it.
    block_major_kv_once_ = block_major_kv_once(
        static_cast<double>(kv_tokens) * shape.h_kv * shape.d * 2 * 2,
        static_cast<double>(shape.topk) * static_cast<double>(total_q) * shape.h_q * shape.d * 2, l2_bytes_);
    inputs_.keep(batch, topk);
    plan_stream_ = stream;
    batch_staged_ = host_batch;
    topk_staged_ = host_topk;
    planned_batch_ = b_count;
    planned_total_q_ = total_q;
    planned_ = true;
  }

  void run(const PrefillArgs& args, cudaStream_t stream) override {
    MSA_REQUIRE(planned_, "plan", "none", "call plan() before run()");
    // The batch and top-k the plan was built from: host values, or the same device tensors.
    check_int32_vector(args.batch.k_len, "k_len", args.batch.k_len.device);
    check_int32_vector(args.batch.cu_seqlens_q, "cu_seqlens_q", args.batch.cu_seqlens_q.device);
    check_tensor(args.topk, "topk", args.topk.device, DType::kInt32, 3);
    inputs_.expect_same(args.batch, args.topk);
    const PrefillArgs a = with_staged_inputs(args);
    const BatchInfo info = validate_prefill(shape, a, options, Device::kCuda);  // metadata only
    MSA_REQUIRE(info.total_q == planned_total_q_, "q.shape[0]", std::to_string(info.total_q),
                "differs from the planned total_q = " + std::to_string(planned_total_q_));
    MSA_REQUIRE(info.batch == planned_batch_, "k_len.shape[0]", std::to_string(info.batch),
                "differs from the planned batch = " + std::to_string(planned_batch_));
    MSA_REQUIRE(contiguous_vector(a.batch.k_len) && contiguous_vector(a.batch.cu_seqlens_q), "k_len.stride[0]",
                std::to_string(a.batch.k_len.stride[0]), "device batch tensors must be contiguous");
    MSA_REQUIRE(!a.sinks.present() || contiguous_vector(a.sinks), "sinks.stride[0]", std::to_string(a.sinks.stride[0]),
                "sinks must be contiguous");
    MSA_REQUIRE(!a.lse.present() || (a.lse.stride[0] == shape.h_q && a.lse.stride[1] == 1), "lse.stride",
                a.lse.present() ? std::to_string(a.lse.stride[0]) + ", " + std::to_string(a.lse.stride[1]) : "",
                "lse must be contiguous [total_q, h_q]");
    check_cuda_prefill(shape, a, planned_total_q_);
    const bool use_union = union_only_ || routed_ || split_union_;
    const bool use_block_major = !union_only_ && !split_union_;
    MSA_REQUIRE(!use_union || a.topk.stride[2] == 1, "topk.stride[2]", std::to_string(a.topk.stride[2]),
                "the tile-union prefill reads top-k rows with a contiguous last dim");
    const int q_per_tile = union_q_per_tile_;
    MSA_REQUIRE(!use_union || shape.h_kv * ((planned_total_q_ + q_per_tile - 1) / q_per_tile) <= INT32_MAX / 2,
                "q.shape[0]", std::to_string(planned_total_q_),
                "the tile-union prefill numbers (KV head, query tile) pairs in 32 bits: h_kv * ceil(total_q / " +
                    std::to_string(q_per_tile) + ") must be < 2^30");
    // Strict mode: every value check of the CPU backend (page table entries, sinks, top-k
    // rows, lengths) on host copies, before anything is launched.
    if (options.strict) strict_run_check(a, stream);
    if (planned_total_q_ == 0) return;  // no query: nothing to write
    if (decode_route_) {
      DecodeArgs d;
      d.q = a.q;
      d.kv = a.kv;
      d.seq_len = a.batch.k_len;
      d.topk = a.topk;
      d.topk_head_major = true;
      d.q_per_request = static_cast<int>(planned_total_q_);
      d.sinks = a.sinks;
      d.out = a.out;
      d.lse = a.lse;
      check_cuda_decode(d);
      launch_decode(shape, d, decode_geo_, decode_ws_, sm_count_, stream);
      return;
    }

    // The tile-union kernel's rows are final (but for split tiles): it writes them to out and
    // lse itself, sinks applied, and the combine leaves them alone.
    prefill_sm90::AttentionParams attn = attention_params(shape, a, planned_total_q_, ws_);
    if (use_union && !split_union_) {
      attn.out = a.out.data;
      attn.stride_out_token = a.out.stride[0];
      attn.stride_out_head = a.out.stride[1];
      attn.lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
      attn.sinks = a.sinks.present() ? a.sinks.ptr<const float>() : nullptr;
    }
    // Both kernels take the same TMA descriptors; building them is the last thing that may
    // throw (a stride TMA cannot describe), before anything is launched.
    const prefill_sm90::PrefillTma tma = prefill_sm90::make_prefill_tma(attn, a.q.dtype, shape.d);
    CombineParams c{};
    c.o_partial = ws_.o_partial;
    c.lse_partial = ws_.lse_partial;
    c.split_counts = ws_.k2q.split_counts;
    // Routed: the combine merges only the rows of tiles the union kernel did not take.
    c.tile_list = routed_ ? ws_.combine_list : nullptr;
    c.tile_count = routed_ ? ws_.combine_count : nullptr;
    c.q_per_tile = q_per_tile;
    c.tiles_per_head = tiles_per_head(planned_total_q_, q_per_tile);
    c.sinks = a.sinks.present() ? a.sinks.ptr<const float>() : nullptr;
    c.out = a.out.data;
    c.stride_out_token = combine_out_stride(a.out, 0);
    c.stride_out_head = combine_out_stride(a.out, 1);
    c.lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
    c.total_q = planned_total_q_;
    c.h_q = shape.h_q;
    c.group = shape.group();
    c.topk = shape.topk;
    c.uniform_count = 1;  // unused: split_counts is given
    if (split_union_) {   // every row's union_splits_ slots
      c.split_counts = nullptr;
      c.uniform_count = union_splits_;
    }
    c.out_fp16 = a.out.dtype == DType::kFP16;
    // Every tile on the union kernel (kTileUnion, or kAuto with union_only_): that kernel alone,
    // writing out and lse. kBlockMajor: the block-major kernel, then the combine. kAuto routed
    // in plan(): the union kernel takes the tiles on the plan's list and writes their rows'
    // results; the block-major kernel takes the plan's work items, which leave those rows out,
    // and the combine merges the other rows' slots. kAuto split (prefill_split_union): the union
    // kernel over every tile, each split union_splits_ ways into the partials' first slots, then
    // the combine over every row.
    dispatch_prefill(a.q.dtype, shape.d, [&]<DType kDtype, int kHeadDim>() {
      if (use_union) {
        prefill_sm90::TileUnionParams u =
            tile_union_params(attn, a, planned_batch_, q_per_tile, union_group_heads_,
                              routed_ ? ws_.union_list : nullptr, routed_ ? ws_.union_count : nullptr);
        u.direct = !split_union_;
        if (split_union_) {
          u.splits = union_splits_;
          u.tiles *= union_splits_;
          u.prefetch_blocks = kTileUnionPrefetchBlocks;
        }
        if (q_per_tile > kTileUnionNarrowQueries)  // wide tiles (plan-free, G <= 3)
          launch_tile_union<kDtype, kHeadDim, TileUnionUse::kWidePrefill>(u, tma, sm_count_, stream);
        else
          launch_tile_union<kDtype, kHeadDim, TileUnionUse::kPrefill>(u, tma, sm_count_, stream);
      }
      if (use_block_major) {
        prefill_sm90::BlockMajorParams b = block_major_params(attn, ws_);
        b.kv_once = block_major_kv_once_;
        launch_block_major<kDtype, kHeadDim>(b, tma, sm_count_, stream);
      }
      if (use_block_major || split_union_)
        launch_combine<kDtype, kHeadDim>(c, sm_count_, stream, /*programmatic=*/true);
    });
  }

  // With every tile on the tile-union kernel (split or not, or a decode step) plan() built
  // nothing: the plan that run() follows is the host builder's with every tile routed (no edge,
  // split count 1), from the planned batch and top-k read back.
  K2qCsr plan_snapshot() const override {
    MSA_REQUIRE(planned_, "plan", "none", "call plan() before plan_snapshot()");
    if (!union_only_ && !decode_route_ && !split_union_) return k2q_device_snapshot(ws_.k2q_geo, ws_.k2q, plan_stream_);
    HostMirrors m;  // (an empty view is not copied: labelled host, nothing of it is read)
    const VarlenBatch batch{as_host(m.mirror(planned_cu_, plan_stream_)),
                            as_host(m.mirror(planned_k_len_, plan_stream_))};
    const TensorView topk = as_host(m.mirror(planned_topk_, plan_stream_));
    m.wait(plan_stream_);
    const std::vector<std::uint8_t> every(
        static_cast<std::size_t>(shape.h_kv * tiles_per_head(planned_total_q_, union_q_per_tile_)), 1);
    return build_k2q_csr_routed(shape, batch, topk, options, TileRoute{union_q_per_tile_, every.data()});
  }

 private:
  // CPU batch / top-k tensors are those planned: use their device copies.
  PrefillArgs with_staged_inputs(const PrefillArgs& args) const {
    PrefillArgs a = args;
    if (a.batch.k_len.present() && a.batch.k_len.device == Device::kCpu && batch_staged_) {
      a.batch.cu_seqlens_q =
          TensorView::contiguous(ws_.cu_seqlens_q, DType::kInt32, {planned_batch_ + 1}, Device::kCuda);
      a.batch.k_len = TensorView::contiguous(ws_.k_len, DType::kInt32, {planned_batch_}, Device::kCuda);
    }
    if (a.topk.present() && a.topk.device == Device::kCpu && topk_staged_)
      a.topk =
          TensorView::contiguous(ws_.topk, DType::kInt32, {shape.h_kv, planned_total_q_, shape.topk}, Device::kCuda);
    return a;
  }

  // Strict plan() with device-resident batch or top-k: the host checks on copies; with a
  // device batch also every k_len against the bound the capacities were sized from.
  void strict_plan_check(const VarlenBatch& batch, const TensorView& topk, std::int64_t max_k_len,
                         cudaStream_t stream) const {
    HostMirrors m;
    const VarlenBatch hb{m.mirror(batch.cu_seqlens_q, stream), m.mirror(batch.k_len, stream)};
    const TensorView ht = m.mirror(topk, stream);
    m.wait(stream);
    const BatchInfo info = read_batch(hb);
    MSA_REQUIRE(info.total_q == topk.dim(1), "topk.shape[1]", std::to_string(topk.dim(1)),
                "must equal cu_seqlens_q[B] = " + std::to_string(info.total_q));
    for (std::int64_t b = 0; max_k_len >= 0 && b < info.batch; ++b)
      MSA_REQUIRE(info.k_len[b] <= max_k_len, "k_len[" + std::to_string(b) + "]", std::to_string(info.k_len[b]),
                  "beyond the max_k_len = " + std::to_string(max_k_len) + " given to plan()");
    validate_topk(ht, info, shape.h_kv, shape.topk, /*strict=*/true, Device::kCpu);
  }

  // Strict run(): validate_prefill on the host, with host copies of every tensor whose values
  // it reads and the others relabelled (only their metadata is read).
  void strict_run_check(const PrefillArgs& a, cudaStream_t stream) const {
    HostMirrors m;
    PrefillArgs h = a;
    h.batch.cu_seqlens_q = m.mirror(a.batch.cu_seqlens_q, stream);
    h.batch.k_len = m.mirror(a.batch.k_len, stream);
    h.topk = m.mirror(a.topk, stream);
    h.kv.page_table = m.mirror(a.kv.page_table, stream);
    h.kv.cu_seqlens_k = m.mirror(a.kv.cu_seqlens_k, stream);
    h.sinks = m.mirror(a.sinks, stream);
    m.wait(stream);
    for (TensorView* t : {&h.q, &h.kv.k, &h.kv.v, &h.out, &h.lse}) *t = as_host(*t);
    validate_prefill(shape, h, options, Device::kCpu);
  }

  DeviceScratch scratch_;  // the caller's workspace or this object's, grown by plan()

  bool planned_ = false;
  PlanInputs inputs_;
  bool routed_ = false;      // plan() routed tiles into ws_.union_* (PrefillPath::kAuto)
  bool union_only_ = false;  // every tile on the tile-union kernel: plan() built nothing
  bool decode_route_ = false;  // one request of <= 16 queries run as a decode step: nothing built
  bool split_union_ = false;   // a few queries of several requests: the union kernel's tiles split
                               // union_splits_ ways, then the combine; nothing built
  int union_splits_ = 1;
  DecodeGeometry decode_geo_{};
  DecodeWorkspace decode_ws_{};
  int union_q_per_tile_ = 0;   // queries per tile of the union kernel's launch (routed: the routing's)
  int union_group_heads_ = 0;  // a plan-free launch's tile order (tile_of_rank_grouped)
  bool block_major_kv_once_ = false;  // the block-major kernel's K/V with EVICT_FIRST
  long long l2_bytes_ = 0;
  TensorView planned_cu_, planned_k_len_, planned_topk_;  // device views plan() read
  PrefillWorkspace ws_{};
  cudaStream_t plan_stream_ = nullptr;
  bool batch_staged_ = false;
  bool topk_staged_ = false;
  std::int64_t planned_batch_ = 0;
  std::int64_t planned_total_q_ = 0;
  int sm_count_ = 0;
};

}  // namespace

std::unique_ptr<SparsePrefill::Impl> make_prefill() { return std::make_unique<PrefillCuda>(); }

std::size_t prefill_workspace_bytes(const AttentionShape& shape, const ProblemSize& problem, const Options& options) {
  check_prefill_shape(shape);
  return prefill_workspace(shape, problem, options, nullptr).bytes;
}

}  // namespace msa::cuda
