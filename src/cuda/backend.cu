// The CUDA backend's operator objects. Operators not yet implemented on the GPU return
// nullptr so that dispatch reports them as unsupported (never a silent CPU fallback).
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "core/batch.h"
#include "core/check.h"
#include "core/impl.h"
#include "core/plan_inputs.h"
#include "core/validate.h"
#include "cuda/combine/launch.h"
#include "cuda/common/check.h"
#include "cuda/plan/k2q_device.h"
#include "cuda/plan/tile_route.h"
#include "cuda/prefill/sm90/launch.h"
#include "cuda/prefill/union_sm90/launch.h"
#include "msa/error.h"

namespace msa::cuda {

bool device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return count > 0;
}

namespace {

std::size_t round256(std::size_t bytes) { return (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256; }

// The supported prefill instance; every other value is an error naming it.
void check_prefill_shape(const AttentionShape& shape) {
  MSA_REQUIRE(shape.d == 128, "shape.d", std::to_string(shape.d),
              "the CUDA sparse prefill supports head dim 128 only (for now)");
  MSA_REQUIRE(shape.topk >= 1 && shape.topk <= 32, "shape.topk", std::to_string(shape.topk),
              "the CUDA sparse prefill supports topk in 1..32");
}

// Workspace of one prefill problem, in this order (each piece 256-byte aligned): the device
// planner's buffers, o_partial, lse_partial, and staging copies of CPU batch / top-k tensors.
struct PrefillLayout {
  K2qDeviceSizes k2q;
  std::size_t o_partial = 0;    // [topk, total_q, h_q, d] bf16
  std::size_t lse_partial = 0;  // [topk, total_q, h_q] fp32
  std::size_t batch = 0;        // cu_seqlens_q [B + 1] then k_len [B], int32
  std::size_t topk = 0;         // [h_kv, total_q, topk] int32
  // PrefillPath::kAuto tile routing (cuda/plan/tile_route.h); 0 bytes for the fixed paths
  std::int64_t tiles = 0;       // h_kv * ceil(total_q / union_sm90_queries_per_tile(G))
  std::size_t union_tile = 0;   // [tiles] uint8
  std::size_t union_list = 0;   // [tiles] int32
  std::size_t union_count = 0;  // [1] int32
  std::size_t route_temp = 0;   // the compaction's scratch
  std::size_t total = 0;
};

PrefillLayout prefill_layout(const AttentionShape& shape, const ProblemSize& problem,
                             const Options& options) {
  check_prefill_shape(shape);
  PrefillLayout l;
  l.k2q = k2q_device_sizes(shape.h_kv, shape.topk, options.q_per_item, problem);
  const auto rows = static_cast<std::size_t>(shape.topk) * static_cast<std::size_t>(problem.total_q) *
                    static_cast<std::size_t>(shape.h_q);
  l.o_partial = round256(rows * static_cast<std::size_t>(shape.d) * 2);
  l.lse_partial = round256(rows * sizeof(float));
  l.batch = round256(static_cast<std::size_t>(2 * problem.batch + 1) * sizeof(std::int32_t));
  l.topk = round256(static_cast<std::size_t>(shape.h_kv) * static_cast<std::size_t>(problem.total_q) *
                    static_cast<std::size_t>(shape.topk) * sizeof(std::int32_t));
  if (options.prefill_path == PrefillPath::kAuto) {
    l.tiles = tile_route_tiles(shape.h_kv, problem.total_q, union_sm90_queries_per_tile(shape.group()));
    l.union_tile = round256(static_cast<std::size_t>(l.tiles));
    l.union_list = round256(static_cast<std::size_t>(l.tiles) * sizeof(std::int32_t));
    l.union_count = round256(sizeof(std::int32_t));
    l.route_temp = round256(tile_route_temp_bytes(l.tiles));
  }
  l.total = l.k2q.total + l.o_partial + l.lse_partial + l.batch + l.topk + l.union_tile + l.union_list +
            l.union_count + l.route_temp;
  return l;
}

struct PrefillWorkspace {
  K2qDeviceBuffers k2q{};
  void* o_partial = nullptr;
  float* lse_partial = nullptr;
  std::int32_t* cu_seqlens_q = nullptr;  // staging, [B + 1]
  std::int32_t* k_len = nullptr;         // staging, [B]
  std::int32_t* topk = nullptr;          // staging, [h_kv, total_q, topk]
  std::uint8_t* union_tile = nullptr;    // PrefillPath::kAuto routing, see PrefillLayout
  std::int32_t* union_list = nullptr;
  std::int32_t* union_count = nullptr;
  void* route_temp = nullptr;
};

PrefillWorkspace carve(const PrefillLayout& l, std::int64_t batch, void* base) {
  PrefillWorkspace w;
  auto* at = static_cast<char*>(base);
  w.k2q = k2q_device_carve(l.k2q, at);
  at += l.k2q.total;
  w.o_partial = at;
  at += l.o_partial;
  w.lse_partial = reinterpret_cast<float*>(at);
  at += l.lse_partial;
  w.cu_seqlens_q = reinterpret_cast<std::int32_t*>(at);
  w.k_len = w.cu_seqlens_q + batch + 1;
  at += l.batch;
  w.topk = reinterpret_cast<std::int32_t*>(at);
  at += l.topk;
  if (l.union_tile > 0) {
    w.union_tile = reinterpret_cast<std::uint8_t*>(at);
    at += l.union_tile;
    w.union_list = reinterpret_cast<std::int32_t*>(at);
    at += l.union_list;
    w.union_count = reinterpret_cast<std::int32_t*>(at);
    at += l.union_count;
    w.route_temp = at;
  }
  return w;
}

bool contiguous_vector(const TensorView& t) { return t.dim(0) <= 1 || t.stride[0] == 1; }

// Host copies of device tensors for the checks that need values (strict mode): each mirror
// is the addressed span of a validated view (strides >= 0), seen with the same strides.
class HostMirrors {
 public:
  TensorView mirror(const TensorView& t, cudaStream_t stream) {
    if (!t.present() || t.device == Device::kCpu || t.numel() == 0) return t;
    std::int64_t span = 1;
    for (int i = 0; i < t.rank; ++i) span += (t.dim(i) - 1) * t.stride[i];
    const std::size_t bytes = static_cast<std::size_t>(span) * dtype_size(t.dtype);
    auto& buf = buffers_.emplace_back((bytes + 3) / 4);
    MSA_CUDA_CHECK(cudaMemcpyAsync(buf.data(), t.data, bytes, cudaMemcpyDeviceToHost, stream));
    TensorView h = t;
    h.data = buf.data();
    h.device = Device::kCpu;
    return h;
  }
  void wait(cudaStream_t stream) { MSA_CUDA_CHECK(cudaStreamSynchronize(stream)); }

 private:
  std::vector<std::vector<std::uint32_t>> buffers_;
};

// The same view, labelled as host memory: for checks that read only its metadata.
TensorView as_host(TensorView t) {
  if (t.present()) t.device = Device::kCpu;
  return t;
}

void copy_to_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  // From pageable memory: returns once the source is staged, so it may be freed right after.
  if (bytes > 0) MSA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

class PrefillCuda final : public SparsePrefill::Impl {
 public:
  PrefillCuda() = default;
  PrefillCuda(const PrefillCuda&) = delete;
  PrefillCuda& operator=(const PrefillCuda&) = delete;
  ~PrefillCuda() override {
    if (owned_ != nullptr) (void)cudaFree(owned_);
  }

  void set_workspace(void* data, std::size_t bytes) override {
    MSA_REQUIRE(reinterpret_cast<std::uintptr_t>(data) % 256 == 0, "workspace.data",
                std::to_string(reinterpret_cast<std::uintptr_t>(data)), "must be 256-byte aligned");
    borrowed_ = data;
    borrowed_bytes_ = data != nullptr ? bytes : 0;
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
    MSA_REQUIRE(batch.cu_seqlens_q.device == batch_device, "cu_seqlens_q.device",
                to_string(batch.cu_seqlens_q.device), "must be where k_len is (" + to_string(batch_device) + ")");
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
    validate_topk(topk, info, shape.h_kv, shape.topk, options.strict && host_batch && host_topk,
                  topk.device);
    // Strict mode checks device-resident batch and top-k values on the host: one synchronisation
    // (strict is opt-in, and such a plan() cannot be captured in a graph).
    if (options.strict && (!host_batch || !host_topk)) strict_plan_check(batch, topk, host_batch ? -1 : max_k_len, stream);

    const ProblemSize problem{b_count, total_q, max_k_len};
    layout_ = prefill_layout(shape, problem, options);
    ws_ = carve(layout_, b_count, workspace(layout_.total));

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
      stage_topk(topk, stream);
      in.topk = ws_.topk;
      in.stride_topk_head = total_q * shape.topk;
      in.stride_topk_token = shape.topk;
    } else {
      in.topk = topk.ptr<const std::int32_t>();
      in.stride_topk_head = topk.stride[0];
      in.stride_topk_token = topk.stride[1];
    }
    // PrefillPath::kAuto: route each tile to the cheaper kernel before the plan is built, so
    // that the k2q plan leaves the union tiles' rows out. The tile-union kernel reads top-k rows
    // with a contiguous last dim; otherwise every tile stays block-major.
    routed_ = options.prefill_path == PrefillPath::kAuto && total_q > 0 && (host_topk || topk.stride[2] == 1);
    if (routed_) {
      TileRouteParams rp{};
      rp.ids = in.topk;
      rp.stride_topk_head = in.stride_topk_head;
      rp.stride_topk_token = in.stride_topk_token;
      rp.cu_seqlens_q = in.cu_seqlens_q;
      rp.k_len = in.k_len;
      rp.batch = static_cast<int>(b_count);
      rp.h_kv = shape.h_kv;
      rp.total_q = total_q;
      rp.topk = shape.topk;
      rp.q_per_tile = union_sm90_queries_per_tile(shape.group());
      rp.union_tile = ws_.union_tile;
      rp.union_list = ws_.union_list;
      rp.union_count = ws_.union_count;
      rp.temp = ws_.route_temp;
      rp.temp_bytes = layout_.route_temp;
      launch_tile_route(rp, stream);
      in.union_tile = ws_.union_tile;
      in.route_q_per_tile = rp.q_per_tile;
    }
    build_k2q_device(layout_.k2q, in, ws_.k2q, stream);

    if (sm_count_ == 0) {
      int device = 0;
      MSA_CUDA_CHECK(cudaGetDevice(&device));
      MSA_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
    }
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
    check_prefill_shape(shape);
    // The batch and top-k the plan was built from: host values, or the same device tensors.
    check_int32_vector(args.batch.k_len, "k_len", args.batch.k_len.device);
    check_int32_vector(args.batch.cu_seqlens_q, "cu_seqlens_q", args.batch.cu_seqlens_q.device);
    check_tensor(args.topk, "topk", args.topk.device, DType::kInt32, 3);
    inputs_.expect_same(args.batch, args.topk);
    // CPU batch / top-k tensors are those planned: use their device copies.
    PrefillArgs a = args;
    if (a.batch.k_len.present() && a.batch.k_len.device == Device::kCpu && batch_staged_) {
      a.batch.cu_seqlens_q = TensorView::contiguous(ws_.cu_seqlens_q, DType::kInt32,
                                                    {planned_batch_ + 1}, Device::kCuda);
      a.batch.k_len = TensorView::contiguous(ws_.k_len, DType::kInt32, {planned_batch_}, Device::kCuda);
    }
    if (a.topk.present() && a.topk.device == Device::kCpu && topk_staged_)
      a.topk = TensorView::contiguous(ws_.topk, DType::kInt32, {shape.h_kv, planned_total_q_, shape.topk},
                                      Device::kCuda);
    const BatchInfo info = validate_prefill(shape, a, options, Device::kCuda);  // metadata only
    MSA_REQUIRE(a.q.dtype == DType::kBF16, "q.dtype", to_string(a.q.dtype),
                "the CUDA sparse prefill supports bf16 only (for now)");
    MSA_REQUIRE(info.total_q == planned_total_q_, "q.shape[0]", std::to_string(info.total_q),
                "differs from the planned total_q = " + std::to_string(planned_total_q_));
    MSA_REQUIRE(info.batch == planned_batch_, "k_len.shape[0]", std::to_string(info.batch),
                "differs from the planned batch = " + std::to_string(planned_batch_));
    MSA_REQUIRE(contiguous_vector(a.batch.k_len) && contiguous_vector(a.batch.cu_seqlens_q),
                "k_len.stride[0]", std::to_string(a.batch.k_len.stride[0]),
                "device batch tensors must be contiguous");
    MSA_REQUIRE(!a.sinks.present() || contiguous_vector(a.sinks), "sinks.stride[0]",
                std::to_string(a.sinks.stride[0]), "sinks must be contiguous");
    MSA_REQUIRE(!a.lse.present() || (a.lse.stride[0] == shape.h_q && a.lse.stride[1] == 1), "lse.stride",
                a.lse.present() ? std::to_string(a.lse.stride[0]) + ", " + std::to_string(a.lse.stride[1]) : "",
                "lse must be contiguous [total_q, h_q]");
    // Strict mode: every value check of the CPU backend (page table entries, sinks, top-k
    // rows, lengths) on host copies, before anything is launched.
    if (options.strict) strict_run_check(a, stream);
    if (planned_total_q_ == 0) return;  // no query: nothing to write

    PrefillParams p{};
    p.q = a.q.data;
    p.stride_q_token = a.q.stride[0];
    p.stride_q_head = a.q.stride[1];
    const TensorView& k = a.kv.k;
    p.k = k.data;
    p.v = a.kv.v.data;
    if (a.kv.paged()) {
      p.stride_kv_page = k.stride[0];
      p.stride_kv_head = k.stride[1];
      p.stride_kv_token = k.stride[2];
      p.num_pages = k.dim(0);
      p.page_size = static_cast<int>(k.dim(2));
      p.page_table = a.kv.page_table.ptr<const std::int32_t>();
      p.stride_page_table = a.kv.page_table.stride[0];
      p.page_table_cols = a.kv.page_table.dim(1);
      p.cu_seqlens_k = nullptr;
    } else {
      p.stride_kv_page = 0;
      p.stride_kv_head = k.stride[1];
      p.stride_kv_token = k.stride[0];
      p.num_pages = 0;
      p.kv_rows = k.dim(0);
      p.page_size = 0;
      p.page_table = nullptr;
      p.stride_page_table = 0;
      p.page_table_cols = 0;
      p.cu_seqlens_k = a.kv.cu_seqlens_k.ptr<const std::int32_t>();
    }
    p.cu_seqlens_q = a.batch.cu_seqlens_q.ptr<const std::int32_t>();
    p.k_len = a.batch.k_len.ptr<const std::int32_t>();
    p.work = ws_.k2q.work;
    p.work_count = ws_.k2q.work_count;
    p.qsplit = ws_.k2q.qsplit;
    p.edges_per_head = layout_.k2q.geo.edges_per_head;
    p.o_partial = ws_.o_partial;
    p.lse_partial = ws_.lse_partial;
    p.total_q = planned_total_q_;
    p.h_q = shape.h_q;
    p.h_kv = shape.h_kv;
    p.group = shape.group();
    p.topk = shape.topk;
    p.scale_log2 = shape.softmax_scale() * 1.4426950408889634f;
    // kTileUnion: the union kernel alone, every tile. kBlockMajor: the block-major kernel alone.
    // Both kernels take the same tensors (TMA descriptors of q, k, v, o_partial): a launch that
    // throws does so before anything is launched, so no output is touched.
    // kAuto (routed in plan()): the union kernel takes the tiles on the plan's list, the
    // block-major kernel the plan's work items, which leave those tiles' rows out; the two write
    // disjoint rows, and the combine merges each row's slots (one for a union row).
    const PrefillPath path = options.prefill_path;
    const bool use_union = path == PrefillPath::kTileUnion || (path == PrefillPath::kAuto && routed_);
    if (use_union) {
      MSA_REQUIRE(a.topk.stride[2] == 1, "topk.stride[2]", std::to_string(a.topk.stride[2]),
                  "the tile-union prefill reads top-k rows with a contiguous last dim");
      UnionParams u{};
      u.attn = p;
      u.topk = a.topk.ptr<const std::int32_t>();
      u.stride_topk_head = a.topk.stride[0];
      u.stride_topk_token = a.topk.stride[1];
      u.batch = static_cast<int>(planned_batch_);
      u.q_per_tile = union_sm90_queries_per_tile(shape.group());
      u.tiles = std::int64_t(shape.h_kv) * ((planned_total_q_ + u.q_per_tile - 1) / u.q_per_tile);
      u.tile_list = path == PrefillPath::kAuto ? ws_.union_list : nullptr;
      u.tile_count = path == PrefillPath::kAuto ? ws_.union_count : nullptr;
      launch_union_sm90(u, sm_count_, stream);  // throws before launching when unsupported
    }
    if (path != PrefillPath::kTileUnion) launch_prefill_sm90(p, sm_count_ * prefill_sm90_ctas_per_sm(), stream);

    CombineParams c{};
    c.o_partial = ws_.o_partial;
    c.lse_partial = ws_.lse_partial;
    c.split_counts = path == PrefillPath::kTileUnion ? nullptr : ws_.k2q.split_counts;
    c.sinks = a.sinks.present() ? a.sinks.ptr<const float>() : nullptr;
    c.out = a.out.data;
    c.stride_out_token = a.out.stride[0];
    c.stride_out_head = a.out.stride[1];
    c.lse = a.lse.present() ? a.lse.ptr<float>() : nullptr;
    c.total_q = planned_total_q_;
    c.h_q = shape.h_q;
    c.group = shape.group();
    c.d = shape.d;
    c.topk = shape.topk;
    c.out_fp16 = a.out.dtype == DType::kFP16;
    launch_combine(c, stream, /*programmatic=*/true);
  }

  K2qCsr plan_snapshot() const override {
    MSA_REQUIRE(planned_, "plan", "none", "call plan() before plan_snapshot()");
    return k2q_device_snapshot(layout_.k2q, ws_.k2q, plan_stream_);
  }

 private:
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

  // The caller's memory (checked) or this object's, grown here (plan may allocate).
  void* workspace(std::size_t bytes) {
    if (borrowed_ != nullptr) {
      MSA_REQUIRE(bytes <= borrowed_bytes_, "workspace.bytes", std::to_string(borrowed_bytes_),
                  "too small: this plan needs " + std::to_string(bytes) +
                      " (SparsePrefill::workspace_bytes)");
      return borrowed_;
    }
    if (owned_bytes_ < bytes) {
      if (owned_ != nullptr) MSA_CUDA_CHECK(cudaFree(owned_));  // waits for work still using it
      owned_ = nullptr;
      owned_bytes_ = 0;
      MSA_CUDA_CHECK(cudaMalloc(&owned_, bytes));
      owned_bytes_ = bytes;
    }
    return owned_;
  }

  // A CPU top-k goes to the staging buffer, made contiguous first when it is strided.
  void stage_topk(const TensorView& topk, cudaStream_t stream) {
    const std::size_t count = static_cast<std::size_t>(topk.numel());
    if (topk.is_contiguous()) {
      copy_to_device(ws_.topk, topk.data, count * sizeof(std::int32_t), stream);
      return;
    }
    std::vector<std::int32_t> packed(count);
    const auto* src = topk.ptr<const std::int32_t>();
    std::size_t i = 0;
    for (std::int64_t h = 0; h < topk.dim(0); ++h)
      for (std::int64_t q = 0; q < topk.dim(1); ++q)
        for (std::int64_t s = 0; s < topk.dim(2); ++s) packed[i++] = src[topk.offset(h, q, s)];
    copy_to_device(ws_.topk, packed.data(), count * sizeof(std::int32_t), stream);
  }

  void* borrowed_ = nullptr;
  std::size_t borrowed_bytes_ = 0;
  void* owned_ = nullptr;
  std::size_t owned_bytes_ = 0;

  bool planned_ = false;
  PlanInputs inputs_;
  bool routed_ = false;  // plan() routed tiles into ws_.union_* (PrefillPath::kAuto)
  PrefillLayout layout_{};
  PrefillWorkspace ws_{};
  cudaStream_t plan_stream_ = nullptr;
  bool batch_staged_ = false;
  bool topk_staged_ = false;
  std::int64_t planned_batch_ = 0;
  std::int64_t planned_total_q_ = 0;
  int sm_count_ = 0;
};

// The public Combine on the device: the prefill's own combine kernel over caller tensors.
class CombineCuda final : public Combine::Impl {
 public:
  void plan(std::int64_t total_q, cudaStream_t) override {
    MSA_REQUIRE(total_q >= 0 && total_q <= INT32_MAX, "total_q", std::to_string(total_q), "must be in [0, 2^31)");
  }

  void run(const CombineArgs& args, cudaStream_t stream) override {
    validate_combine(shape, args, Device::kCuda, options.strict);  // metadata only
    // What the kernel reads: bf16 partials, and every tensor but out contiguous.
    MSA_REQUIRE(args.o_partial.dtype == DType::kBF16, "o_partial.dtype", to_string(args.o_partial.dtype),
                "the CUDA combine reads bf16 partials (fp32 partials: the CPU backend)");
    const auto contiguous = [](const TensorView& t, const char* name) {
      MSA_REQUIRE(!t.present() || t.is_contiguous(), std::string(name) + ".stride", t.shape_string(),
                  "the CUDA combine needs it contiguous");
    };
    contiguous(args.o_partial, "o_partial");
    contiguous(args.lse_partial, "lse_partial");
    contiguous(args.split_counts, "split_counts");
    contiguous(args.sinks, "sinks");
    contiguous(args.lse, "lse");
    if (options.strict) {  // split counts and sinks, read on the host (one synchronisation)
      HostMirrors m;
      CombineArgs h = args;
      h.split_counts = m.mirror(args.split_counts, stream);
      h.sinks = m.mirror(args.sinks, stream);
      m.wait(stream);
      for (TensorView* t : {&h.o_partial, &h.lse_partial, &h.out, &h.lse}) *t = as_host(*t);
      validate_combine(shape, h, Device::kCpu, true);
    }
    CombineParams c{};
    c.o_partial = args.o_partial.data;
    c.lse_partial = args.lse_partial.ptr<const float>();
    c.split_counts = args.split_counts.ptr<const std::int32_t>();
    c.sinks = args.sinks.present() ? args.sinks.ptr<const float>() : nullptr;
    c.out = args.out.data;
    c.stride_out_token = args.out.stride[0];
    c.stride_out_head = args.out.stride[1];
    c.lse = args.lse.present() ? args.lse.ptr<float>() : nullptr;
    c.total_q = args.o_partial.dim(1);
    c.h_q = shape.h_q;
    c.group = shape.group();
    c.d = shape.d;
    c.topk = shape.topk;
    c.out_fp16 = args.out.dtype == DType::kFP16;
    launch_combine(c, stream, /*programmatic=*/false);
  }
};

}  // namespace

std::unique_ptr<SparsePrefill::Impl> make_prefill() { return std::make_unique<PrefillCuda>(); }
std::unique_ptr<SparseDecode::Impl> make_decode() { return nullptr; }
std::unique_ptr<Indexer::Impl> make_indexer() { return nullptr; }
std::unique_ptr<TopK::Impl> make_topk() { return nullptr; }
std::unique_ptr<Combine::Impl> make_combine() { return std::make_unique<CombineCuda>(); }

std::size_t prefill_workspace_bytes(const AttentionShape& shape, const ProblemSize& problem,
                                    const Options& options) {
  return prefill_layout(shape, problem, options).total;
}

}  // namespace msa::cuda
