// Device k2q planner: the geometry and limits of a plan, its workspace layout, and the launch
// sequence of its kernels (k2q_kernels.cuh, which describes the stages).
#include "cuda/plan/k2q_device.h"

#include <cuda_runtime.h>

#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <algorithm>
#include <climits>
#include <cub/device/device_scan.cuh>
#include <mutex>
#include <string>

#include "core/check.h"
#include "core/tile_route.h"
#include "cuda/common/check.h"
#include "cuda/common/cub_temp.h"
#include "cuda/common/launch.h"
#include "cuda/common/per_device.h"
#include "cuda/plan/k2q_bitmap_kernels.cuh"
#include "cuda/plan/k2q_fused_kernels.cuh"
#include "cuda/plan/k2q_grid_kernels.cuh"
#include "cuda/plan/k2q_kernels.cuh"
#include "cuda/plan/k2q_params.h"
#include "cuda/plan/k2q_small_kernels.cuh"

namespace msa::cuda {

namespace {

constexpr int kMinQPerUnit = 64;
// Small batches: units are halved (down to 8 queries, or one warp pass) while they give fewer
// count/scatter warps than this and their histograms stay within kUnitCountsBudget (or the size
// they had). Measured on the H100 (docs/performance.md step 20): a 171-token chunk on a 128k
// prefix had 3 units per head, whose warps each walked 64 passes in series, and the count and
// scatter kernels took 64 and 81 us of a 214 us plan. 2048 warps rather than 1024 (step 30):
// plan 0.069 -> 0.063 ms at S = 8k, 0.103 -> 0.087 at 16k, the same at 32k (already 2052).
constexpr std::int64_t kUnitWarpsWanted = 2048;
constexpr std::int64_t kUnitCountsBudget = std::int64_t{16} << 20;  // bytes
constexpr std::size_t kUnitSmemMax = 227 * 1024;  // sm_90 opt-in limit per CTA
constexpr std::int64_t kInt32Max = INT_MAX;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

std::int64_t next_pow2(std::int64_t v) {
  std::int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Entries of the flat (edges, items) scan: one per row and a zero padding row per head.
std::int64_t scan_items(const K2qDeviceGeometry& g) { return (g.max_rows + 1) * g.h_kv; }

// Words of unit_bits: the bitmap path's [h_kv, bitmap_units, max_blocks] where it fits, a bound
// that never shrinks as the batch, total_q or max_k_len grow (blocks counted up to the path's
// limit, so a larger problem that does not fit still holds a smaller one's words).
std::int64_t bitmap_words(const K2qDeviceGeometry& g) {
  return std::int64_t{g.h_kv} * (ceil_div(g.total_q, k2q::kBitmapQPerUnit) + g.batch) *
         std::min<std::int64_t>(g.max_blocks, k2q::kBitmapMaxBlocks);
}

// Entries of unit_extent: the bitmap path's [h_kv, bitmap_units] (the same bound's units).
std::int64_t bitmap_extents(const K2qDeviceGeometry& g) {
  return std::int64_t{g.h_kv} * (ceil_div(g.total_q, k2q::kBitmapQPerUnit) + g.batch);
}

// The flat scan's input: entry i of [h_kv, stride] row totals, zero for rows past total_rows
// (the unit prefix writes only existing rows) and for each head's padding row.
struct LiveRowTotal {
  const K2qRowTotal* totals;
  const std::int32_t* total_rows;
  std::int64_t stride;  // max_rows + 1
  __device__ K2qRowTotal operator()(std::int64_t i) const {
    return i % stride < *total_rows ? totals[i] : K2qRowTotal{0};
  }
};

k2q::BuildParams make_params(const K2qDeviceGeometry& g, const K2qDeviceInputs& in, const K2qDeviceBuffers& out) {
  k2q::BuildParams p{};
  p.cu_seqlens_q = in.cu_seqlens_q;
  p.k_len = in.k_len;
  p.topk_ids = in.topk;
  p.stride_topk_head = in.stride_topk_head;
  p.stride_topk_token = in.stride_topk_token;
  p.union_tile = in.union_tile;
  p.route_q_per_tile = in.union_tile != nullptr ? in.route_q_per_tile : 1;
  p.route_per_head = in.union_tile != nullptr ? static_cast<int>(tiles_per_head(g.total_q, in.route_q_per_tile)) : 0;
  if (in.route != nullptr) {  // the planner routes and lists the flagged tiles
    p.union_list = in.route->union_list;
    p.union_count = in.route->union_count;
    p.combine_list = in.route->combine_list;
    p.combine_count = in.route->combine_count;
    p.route_q_per_tile = in.route->q_per_tile;
    p.route_group = in.route->group;
    p.route_per_head = static_cast<int>(tiles_per_head(g.total_q, in.route->q_per_tile));
    if (g.path == K2qPath::kSmall)
      p.route_tile_out = in.route->union_tile;  // in its head CTAs
    else
      p.union_tile = in.route->union_tile;  // flags of the route/map launch, read by the count
  }
  p.row_coords = out.row_coords;
  p.row_ptr = out.row_ptr;
  p.qsplit = out.qsplit;
  p.split_counts = out.split_counts;
  p.work = out.work;
  p.work_count = out.work_count;
  p.total_rows = out.total_rows;
  p.row_of = out.row_of;
  p.unit_start = out.unit_start;
  p.unit_counts = out.unit_counts;
  p.unit_bits = out.unit_bits;
  p.unit_extent = out.unit_extent;
  p.row_totals = out.row_totals;
  p.row_scan = out.row_scan;
  p.task_totals = out.task_totals;
  p.batch = static_cast<int>(g.batch);
  p.total_q = static_cast<int>(g.total_q);
  p.h_kv = g.h_kv;
  p.topk = g.topk;
  p.topk_pow2 = static_cast<int>(next_pow2(g.topk));
  p.log_topk_pow2 = 0;
  while ((1 << p.log_topk_pow2) < p.topk_pow2) ++p.log_topk_pow2;
  p.q_per_item = g.q_per_item;
  p.q_per_unit = g.q_per_unit;
  p.max_blocks = static_cast<int>(g.max_blocks);
  p.max_rows = static_cast<int>(g.max_rows);
  p.max_units = static_cast<int>(g.max_units);
  p.level_tiles = static_cast<int>(std::max<std::int64_t>(1, ceil_div(g.max_blocks, k2q::kLevelsPerTile)));
  p.unit_warps = g.unit_warps;
  p.edges_per_head = static_cast<int>(g.edges_per_head);
  p.work_capacity = static_cast<int>(g.work_capacity);
  p.tasks_per_head = g.grid_tasks_per_head;
  if (g.path == K2qPath::kFused) {
    p.q_per_unit = g.fused_q_per_unit;
    p.tasks_per_head = g.fused_tasks_per_head;
  }
  if (g.path == K2qPath::kBitmap) {
    p.q_per_unit = k2q::kBitmapQPerUnit;
    p.unit_aligned = true;
    p.max_units = static_cast<int>(g.bitmap_units);
    // Its units (32-aligned windows of a request) hold whole tiles of any q_per_tile dividing 32,
    // except the tiles that span requests: it routes the tiles inside its units itself.
    if (in.route != nullptr && k2q::kBitmapQPerUnit % in.route->q_per_tile == 0) p.fold_tile_out = in.route->union_tile;
  }
  return p;
}

// Dynamic shared memory above the default: raised only when a larger plan needs it (on the
// current device), so that a captured call never sets it. The count and scatter kernels
// (general path) share a grant, the small path's head kernel has its own (the grid path's
// kernel gets its own in grid_resident).
void grant_smem(bool small, std::size_t bytes) {
  // The default limit holds static and dynamic shared memory together (the head kernel has
  // some static; the count and scatter kernels have none).
  static const std::size_t small_static = [] {
    cudaFuncAttributes attr{};
    MSA_CUDA_CHECK(cudaFuncGetAttributes(&attr, k2q::k2q_small_head_kernel));
    return attr.sharedSizeBytes;
  }();
  if (bytes + (small ? small_static : 0) <= kK2qUnitSmemDefault) return;
  // Per device ordinal (a function attribute holds on one device); past 64, set every time.
  static std::mutex mutex;
  static std::size_t granted_unit[64] = {};   // above kK2qUnitSmemDefault once set
  static std::size_t granted_small[64] = {};  // its default is 48 KB less its static memory
  int device = 0;
  MSA_CUDA_CHECK(cudaGetDevice(&device));
  const bool tracked = device >= 0 && device < 64;
  const std::lock_guard<std::mutex> lock(mutex);
  std::size_t* granted = !tracked ? nullptr : small ? &granted_small[device] : &granted_unit[device];
  if (granted != nullptr && bytes <= *granted) return;
  const auto set = [bytes](auto kernel) {
    MSA_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  };
  if (small) {
    set(k2q::k2q_small_head_kernel);
  } else {
    set(k2q::k2q_count_kernel);
    set(k2q::k2q_scatter_kernel);
  }
  if (granted != nullptr) *granted = bytes;
}

// CTAs of the cooperative paths the current device holds at once (a cooperative launch's
// condition; 0: none). The first call on a device raises the grid and fused kernels' shared
// memory to their largest need (the fused path's counters for kFusedMaxBlocks, routing tables of
// kTileUnionMaxEntries) and asks the device's occupancy there.
struct Resident {
  int grid;
  int fused;
  int walk;  // the bitmap walk's CTAs at its launch bound
};
Resident cooperative_resident() {
  static PerDevice<Resident> resident;
  return resident.get([] {
    int device = 0;
    MSA_CUDA_CHECK(cudaGetDevice(&device));
    int sms = 0;
    MSA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const auto per_sm = [](auto kernel, int threads, std::size_t bytes) {
      MSA_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
      int n = 0;
      MSA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, bytes));
      return n;
    };
    const std::size_t grid_bytes = k2q::grid_smem_bytes(kTileUnionMaxEntries);
    const int grid = std::min(per_sm(k2q::k2q_grid_kernel<16>, k2q::kGridThreads, grid_bytes),
                              per_sm(k2q::k2q_grid_kernel<32>, k2q::kGridThreads, grid_bytes));
    const int fused = per_sm(k2q::k2q_fused_kernel, k2q::kFusedThreads,
                             k2q::fused_smem(k2q::kFusedMaxBlocks, kTileUnionMaxEntries).bytes);
    return Resident{sms * grid, sms * fused, sms * k2q::kWalkCtasPerSm};
  });
}

}  // namespace

bool k2q_small_fits(const K2qDeviceGeometry& g) {
  using namespace k2q;
  return g.batch >= 1 && g.batch <= kSmallMaxBatch && g.total_q <= kSmallMaxQueries &&
         g.total_q * next_pow2(g.topk) <= kSmallMaxSlots && g.max_rows <= kSmallMaxRows &&
         static_cast<std::int64_t>(g.h_kv) * g.max_rows <= (std::int64_t{1} << 16);
}

void k2q_device_prepare() { (void)cooperative_resident(); }

bool k2q_grid_fits(K2qDeviceGeometry& g) {
  using namespace k2q;
  g.grid_tasks_per_head = 0;
  if (g.batch < 1 || g.batch > kGridMaxBatch || g.total_q > kGridMaxQueries || g.topk > kGridMaxTopk ||
      g.h_kv > kGridMaxTasks)
    return false;
  // As many level ranges per head as kGridMaxTasks CTAs allow, but no more than there are levels;
  // each range's rows (its levels times the requests) must fit a task.
  const std::int64_t per_head = std::max<std::int64_t>(1, std::min<std::int64_t>(kGridMaxTasks / g.h_kv, g.max_blocks));
  if (ceil_div(g.max_blocks, per_head) * g.batch > kGridTaskRows) return false;
  g.grid_tasks_per_head = static_cast<int>(per_head);
  return true;
}

bool k2q_fused_fits(K2qDeviceGeometry& g) {
  using namespace k2q;
  g.fused_tasks_per_head = 0;
  g.fused_q_per_unit = 0;
  if (g.batch < 1 || g.batch > kFusedMaxBatch || g.h_kv > kGridMaxTasks || g.max_blocks > kFusedMaxBlocks) return false;
  // A row range and about one unit of queries per CTA of kGridMaxTasks (k2q_device_sizes makes
  // the units no smaller than the general path's).
  const std::int64_t per_head = std::max(1, kGridMaxTasks / g.h_kv);
  g.fused_tasks_per_head = static_cast<int>(per_head);
  g.fused_q_per_unit = static_cast<int>(std::max<std::int64_t>(1, ceil_div(g.total_q, per_head)));
  return true;
}

bool k2q_bitmap_fits(K2qDeviceGeometry& g) {
  g.bitmap_units = 0;
  if (g.max_blocks > k2q::kBitmapMaxBlocks) return false;
  const std::int64_t units = ceil_div(g.total_q, k2q::kBitmapQPerUnit) + g.batch;
  if (units < 1 || units > kInt32Max) return false;  // an empty batch (B = 0) takes the general path
  g.bitmap_units = units;
  return true;
}

// The fewest queries of a histogram unit: one warp pass of the count kernels.
static std::int64_t unit_q_floor(int topk) { return std::max<std::int64_t>(8, 32 / next_pow2(topk)); }

// Words of unit_counts: the chosen units' [h_kv, max_units, max_blocks], within a bound that
// never shrinks as the batch, total_q or max_k_len grow, so that the workspace of a problem
// holds any smaller one's (include/msa/prefill.h). The units' count is not monotone: q_per_unit
// doubles as max_blocks / topk crosses a power of two. Two bounds are, on the words U(q) =
// h_kv (ceil(total_q / q) + batch) max_blocks of units of q queries, which shrink as q grows:
// - k2q_device_sizes starts at q0 >= max_blocks / topk and halves q only while U stays within
//   max(kUnitCountsBudget / 4, U(q0)), and U(q0) <= h_kv (total_q topk + (batch + 1) max_blocks);
// - q never goes below min(kMinQPerUnit, the one-warp-pass floor), a constant of the topk.
static std::int64_t unit_counts_words(const K2qDeviceGeometry& g) {
  const std::int64_t chosen = std::int64_t{g.h_kv} * g.max_units * g.max_blocks;
  const auto words = [&](std::int64_t q) {
    return std::int64_t{g.h_kv} * (ceil_div(g.total_q, q) + g.batch) * g.max_blocks;
  };
  const std::int64_t q_low = std::min<std::int64_t>(kMinQPerUnit, unit_q_floor(g.topk));
  const std::int64_t by_budget =
      std::max<std::int64_t>(kUnitCountsBudget / std::int64_t{sizeof(std::int32_t)},
                             std::int64_t{g.h_kv} * (g.total_q * g.topk + (g.batch + 1) * g.max_blocks));
  // The bitmap path's units (32 queries) where it fits: their words are unit_bits'.
  const std::int64_t bound = std::max(std::min(by_budget, words(q_low)), bitmap_words(g));
  MSA_ASSERT(chosen <= bound && g.h_kv * g.bitmap_units * g.max_blocks <= bound);
  return bound;
}

K2qDeviceSizes k2q_device_sizes(int h_kv, int topk, int q_per_item, const ProblemSize& problem,
                                int capacity_q_per_item) {
  MSA_REQUIRE(h_kv >= 1 && h_kv <= 65535, "shape.h_kv", std::to_string(h_kv), "must be in 1..65535");
  MSA_REQUIRE(topk >= 1 && topk <= 32, "shape.topk", std::to_string(topk), "the device planner supports topk in 1..32");
  AttentionShape shape;
  shape.h_kv = h_kv;
  shape.h_q = h_kv;
  shape.topk = topk;
  const K2qSizes ks = k2q_sizes(shape, problem, q_per_item);  // checks q_per_item and problem >= 0

  K2qDeviceSizes s;
  K2qDeviceGeometry& g = s.geo;
  g.batch = problem.batch;
  g.total_q = problem.total_q;
  g.max_k_len = problem.max_k_len;
  g.h_kv = h_kv;
  g.topk = topk;
  g.q_per_item = q_per_item;
  g.max_blocks = ceil_div(problem.max_k_len, kBlockSize);
  g.max_rows = ks.max_rows;
  g.edges_per_head = ks.edges_per_head;
  MSA_ASSERT(capacity_q_per_item >= 0 && capacity_q_per_item <= q_per_item);
  g.work_capacity =
      capacity_q_per_item >= 1 ? k2q_sizes(shape, problem, capacity_q_per_item).work_capacity : ks.work_capacity;
  MSA_REQUIRE(scan_items(g) <= kInt32Max, "max_k_len", std::to_string(problem.max_k_len),
              "batch * ceil(max_k_len / " + std::to_string(kBlockSize) + ") * h_kv rows must fit in int32");

  // Units: enough queries that the per-unit histograms (max_blocks per unit) stay about the
  // size of the unit's edges, never fewer than kMinQPerUnit; then, for small batches, smaller
  // units while the warps are few (kUnitWarpsWanted) and the histograms fit the budget.
  std::int64_t q_unit = std::max<std::int64_t>(kMinQPerUnit, next_pow2(ceil_div(g.max_blocks, topk)));
  const auto units_of = [&](std::int64_t q) { return ceil_div(problem.total_q, q) + problem.batch; };
  const auto counts_bytes = [&](std::int64_t q) {  // in double: hostile sizes must not overflow
    return static_cast<double>(h_kv) * static_cast<double>(units_of(q)) * static_cast<double>(g.max_blocks) * 4.0;
  };
  const std::int64_t q_floor = unit_q_floor(topk);
  const double budget = std::max(static_cast<double>(kUnitCountsBudget), counts_bytes(q_unit));
  while (q_unit / 2 >= q_floor && units_of(q_unit) * h_kv < kUnitWarpsWanted && counts_bytes(q_unit / 2) <= budget)
    q_unit /= 2;
  g.q_per_unit = static_cast<int>(q_unit);
  g.max_units = units_of(q_unit);
  // The fused path's units share unit_counts (row stride max_units): never more of them.
  const bool fused_fits = k2q_fused_fits(g);
  if (fused_fits) g.fused_q_per_unit = std::max(g.fused_q_per_unit, g.q_per_unit);
  MSA_REQUIRE(g.max_units <= kInt32Max, "batch", std::to_string(problem.batch), "too many requests");
  const std::size_t warp_smem = static_cast<std::size_t>(g.max_blocks) * sizeof(std::int32_t);
  MSA_REQUIRE(warp_smem <= kUnitSmemMax, "max_k_len", std::to_string(problem.max_k_len),
              "the device planner keeps one counter per block of a request in shared memory: at "
              "most " +
                  std::to_string(kUnitSmemMax / sizeof(std::int32_t) * kBlockSize) + " tokens");
  g.unit_warps =
      warp_smem == 0
          ? k2q::kMaxUnitWarps
          : static_cast<int>(std::clamp<std::size_t>(kK2qUnitSmemDefault / warp_smem, 1, k2q::kMaxUnitWarps));
  g.unit_smem_bytes = warp_smem * static_cast<std::size_t>(g.unit_warps);
  const std::int64_t slots = g.total_q * next_pow2(topk);                   // top-k slots per head
  const std::int64_t pairs = static_cast<std::int64_t>(h_kv) * g.max_rows;  // (head, row) pairs
  const bool small_fits = k2q_small_fits(g);
  const bool small_chosen = small_fits && slots <= k2q::kSmallChosenSlots && pairs <= k2q::kSmallChosenPairs;
  if (small_fits)  // also where not chosen: tests may choose it
    g.small_smem_bytes =
        static_cast<std::size_t>(k2q::small_smem(static_cast<int>(g.max_rows), static_cast<int>(slots)).bytes);
  // The grid path where it fits and was measured faster (docs/performance.md, steps 41 and 42):
  // up to kGridChosenQueries, unless the small path is chosen and its problem is light (at most
  // kGridSmallSlots top-k slots and kGridSmallPairs (head, row) pairs), where the small path's
  // one SM per head costs less than the grid path's phases and barriers. Then the fused path,
  // where it fits, on problems that are not light, up to kFusedChosenQueries.
  const bool grid_fits = k2q_grid_fits(g);
  const bool small_light = small_chosen && slots <= k2q::kGridSmallSlots && pairs <= k2q::kGridSmallPairs;
  const bool grid_chosen = grid_fits && g.total_q <= k2q::kGridChosenQueries && !small_light;
  // The bitmap path where it fits, in place of the general path, and in place of the fused path
  // on large chunks with short prefixes.
  const bool bitmap_fits = k2q_bitmap_fits(g);
  const bool bitmap_over_fused = bitmap_fits && g.total_q > k2q::kBitmapOverFusedQueries &&
                                 g.total_q >= k2q::kBitmapOverFusedQueriesPerBlock * g.max_blocks;
  const bool fused_chosen =
      fused_fits && !grid_chosen && !small_light && g.total_q <= k2q::kFusedChosenQueries && !bitmap_over_fused;
  g.path = grid_chosen    ? K2qPath::kGrid
           : fused_chosen ? K2qPath::kFused
           : small_chosen ? K2qPath::kSmall
           : bitmap_fits  ? K2qPath::kBitmap
                          : K2qPath::kGeneral;

  Arena sizing;
  k2q_device_layout(g, sizing);
  s.total = sizing.bytes();
  return s;
}

K2qDeviceBuffers k2q_device_layout(const K2qDeviceGeometry& g, Arena& arena) {
  const auto n = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  const std::int64_t h_kv = g.h_kv;
  K2qDeviceBuffers b{};
  b.row_coords = arena.take<std::int32_t>(n(g.max_rows * 2));
  b.row_ptr = arena.take<std::int32_t>(n(h_kv * (g.max_rows + 1)));
  b.qsplit = arena.take<std::int32_t>(n(h_kv * g.edges_per_head));
  b.split_counts = arena.take<std::int32_t>(n(g.total_q * h_kv));
  b.work = arena.take<WorkItem>(n(g.work_capacity));
  b.work_count = arena.take<std::int32_t>(1);
  b.total_rows = arena.take<std::int32_t>(1);
  b.row_of = arena.take<std::int32_t>(n(g.batch * g.max_blocks));
  b.unit_start = arena.take<std::int32_t>(n(g.batch + 1));
  b.unit_counts = arena.take<std::int32_t>(n(unit_counts_words(g)));
  b.unit_bits = arena.take<std::uint32_t>(n(bitmap_words(g)));
  b.unit_extent = arena.take<std::int32_t>(n(bitmap_extents(g)));
  b.row_totals = arena.take<K2qRowTotal>(n(scan_items(g)));
  b.row_scan = arena.take<K2qRowTotal>(n(scan_items(g)));
  b.task_totals = arena.take<K2qRowTotal>(n(k2q::kGridMaxTasks));
  b.cub_temp = arena.take_bytes(cub_temp_bound(scan_items(g)));
  return b;
}

void build_k2q_device(const K2qDeviceGeometry& g, const K2qDeviceInputs& in, const K2qDeviceBuffers& out,
                      cudaStream_t stream) {
  using namespace k2q;
  MSA_ASSERT(in.union_tile == nullptr || in.route == nullptr);
  // Where the device cannot hold the grid path's CTAs together: the small path if it fits, else
  // the general one (the workspace layout is the same for all three).
  const int grid_ctas = g.h_kv * g.grid_tasks_per_head;
  if (g.path == K2qPath::kGrid && !(grid_ctas > 0 && grid_ctas <= cooperative_resident().grid)) {
    K2qDeviceGeometry other = g;
    other.path = k2q_small_fits(g) ? K2qPath::kSmall : K2qPath::kGeneral;
    build_k2q_device(other, in, out, stream);
    return;
  }
  static_assert(kGridMaxTasks + 1 <= kRouteCallSlots, "a cooperative planner CTA without a slot");
  MSA_ASSERT(in.route == nullptr || (in.route->call_slots != nullptr) == (in.route->call_counters != nullptr));
  if (g.path == K2qPath::kGrid) {
    const BuildParams p = make_params(g, in, out);
    const TileRouteParams route = in.route != nullptr ? *in.route : TileRouteParams{};
    const int route_on = in.route != nullptr ? 1 : 0;
    const LaunchShape shape{dim3(static_cast<unsigned>(grid_ctas)), dim3(kGridThreads),
                            grid_smem_bytes(route_on ? route.q_per_tile * route.topk : 0)};
    if (g.topk <= 16)
      launch_cooperative(k2q_grid_kernel<16>, shape, stream, p, route, route_on);
    else
      launch_cooperative(k2q_grid_kernel<32>, shape, stream, p, route, route_on);
    return;
  }
  if (g.path == K2qPath::kFused) {
    // As many CTAs as it has row tasks, and a spare one to list the routed tiles while the others
    // run their row tasks, or as many as the device holds at once; the general path where it
    // holds none.
    const int ctas =
        std::min(g.h_kv * g.fused_tasks_per_head + (in.route != nullptr ? 1 : 0), cooperative_resident().fused);
    if (ctas <= 0) {
      K2qDeviceGeometry other = g;
      other.path = K2qPath::kGeneral;
      build_k2q_device(other, in, out, stream);
      return;
    }
    const BuildParams p = make_params(g, in, out);
    const TileRouteParams route = in.route != nullptr ? *in.route : TileRouteParams{};
    const int route_on = in.route != nullptr ? 1 : 0;
    const LaunchShape shape{dim3(static_cast<unsigned>(ctas)), dim3(kFusedThreads),
                            fused_smem(g.max_blocks, route_on ? route.q_per_tile * route.topk : 0).bytes};
    launch_cooperative(k2q_fused_kernel, shape, stream, p, route, route_on);
    return;
  }
  // The routing decided for the call, on the paths that do not decide it in their own launch:
  // a launch of its own first (launch_route_call), whose flags and lists the planner then takes
  // (with no tile the planner's own routing writes the empty lists).
  if (in.route != nullptr && in.route->call_counters != nullptr &&
      tile_route_tiles(in.route->h_kv, in.route->total_q, in.route->q_per_tile) > 0) {
    MSA_CUDA_CHECK(cudaMemsetAsync(in.route->call_counters, 0, sizeof(RouteCallCounters), stream));
    launch_route_call(*in.route, in.route->call_counters, stream);
    K2qDeviceInputs flagged = in;
    flagged.route = nullptr;
    flagged.union_tile = in.route->union_tile;
    flagged.route_q_per_tile = in.route->q_per_tile;
    build_k2q_device(g, flagged, out, stream);
    return;
  }
  if (g.path == K2qPath::kSmall) {
    MSA_ASSERT(k2q_small_fits(g) && g.small_smem_bytes > 0);
    const BuildParams p = make_params(g, in, out);
    grant_smem(true, g.small_smem_bytes);
    k2q_small_head_kernel<<<static_cast<unsigned>(g.h_kv), kSmallThreads, g.small_smem_bytes, stream>>>(p);
    MSA_CUDA_CHECK(cudaGetLastError());
    const LaunchShape finish{dim3(static_cast<unsigned>(g.h_kv)), dim3(kSmallThreads),
                             static_cast<std::size_t>(g.max_rows) * sizeof(int)};
    launch_pdl(k2q_small_finish_kernel, finish, stream, true, p);
    return;
  }
  const BuildParams p = make_params(g, in, out);
  const std::int64_t n_scan = scan_items(g);
  // Plain launches: programmatic ones (each kernel letting the next launch at once and waiting
  // for the previous grid) made the plan slower in a graph, 0.047 -> 0.061 ms for 2048 tokens on
  // a 128k prefix (docs/performance.md, step 36).

  // The routing's flags beside the row map (their list is compacted in the finish launch, or
  // beside the bitmap path's walk).
  // The bitmap path routing its own tiles leaves the row map launch the tiles that span
  // requests (none in a batch of one), a lane each to find them.
  TileRouteParams route{};
  int route_ctas = 0;
  std::size_t map_smem = sizeof(MapTemp);
  const int spanning_only = p.fold_tile_out != nullptr ? 1 : 0;
  if (in.route != nullptr) {
    route = *in.route;
    route_ctas = tile_route_ctas(route);
    if (spanning_only != 0)
      route_ctas = route.batch <= 1
                       ? 0
                       : static_cast<int>(std::min<std::int64_t>(
                             route_ctas, ceil_div(tile_route_tiles(route.h_kv, route.total_q, route.q_per_tile),
                                                  std::int64_t{kRouteWarps} * 32)));
    if (route_ctas > 0) map_smem = std::max(map_smem, tile_route_smem_bytes(route));
  }
  const auto map_ctas = static_cast<unsigned>(route_ctas + g.max_blocks + 1);
  switch (route_ctas > 0 ? route_lane_entries(route.q_per_tile * route.topk) : 4) {
    case 4:
      k2q_route_map_kernel<4><<<map_ctas, kMapThreads, map_smem, stream>>>(p, route, route_ctas, spanning_only);
      break;
    case 8:
      k2q_route_map_kernel<8><<<map_ctas, kMapThreads, map_smem, stream>>>(p, route, route_ctas, spanning_only);
      break;
    default:
      k2q_route_map_kernel<16><<<map_ctas, kMapThreads, map_smem, stream>>>(p, route, route_ctas, spanning_only);
  }

  // The count: per-unit histograms, or the bitmap path's words.
  const bool bitmap = g.path == K2qPath::kBitmap;
  const dim3 unit_grid(static_cast<unsigned>(std::max<std::int64_t>(1, ceil_div(g.max_units, g.unit_warps))),
                       static_cast<unsigned>(g.h_kv));
  const unsigned unit_threads = static_cast<unsigned>(g.unit_warps * 32);
  const dim3 bits_grid(static_cast<unsigned>(std::max<std::int64_t>(1, ceil_div(g.bitmap_units, kBitsWarps))),
                       static_cast<unsigned>(g.h_kv));
  if (bitmap) {
    MSA_ASSERT(g.bitmap_units > 0 && g.max_blocks <= kBitmapMaxBlocks);
    const std::size_t bits_smem = static_cast<std::size_t>(kBitsWarps) * g.max_blocks * sizeof(std::uint32_t);
    k2q_bits_kernel<<<bits_grid, kBitsWarps * 32, bits_smem, stream>>>(p);
  } else {
    grant_smem(false, g.unit_smem_bytes);
    k2q_count_kernel<<<unit_grid, unit_threads, g.unit_smem_bytes, stream>>>(p);
  }

  const dim3 prefix_grid(static_cast<unsigned>(std::max<std::int64_t>(1, g.batch * p.level_tiles)),
                         static_cast<unsigned>(g.h_kv));
  if (bitmap)
    k2q_unit_prefix_kernel<true><<<prefix_grid, kPrefixWarps * 32, 0, stream>>>(p);
  else
    k2q_unit_prefix_kernel<false><<<prefix_grid, kPrefixWarps * 32, 0, stream>>>(p);

  // The flat scan reads rows past total_rows (which the unit prefix leaves unwritten) as zeros.
  const auto scan_in = thrust::make_transform_iterator(thrust::counting_iterator<std::int64_t>(0),
                                                       LiveRowTotal{p.row_totals, p.total_rows, g.max_rows + 1});
  std::size_t temp_bytes = 0;
  MSA_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, scan_in, p.row_scan, static_cast<int>(n_scan), stream));
  cub_temp_check(temp_bytes, cub_temp_bound(n_scan), "k2q scan scratch");
  MSA_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(out.cub_temp, temp_bytes, scan_in, p.row_scan, static_cast<int>(n_scan), stream));

  const auto finalize_ctas = static_cast<unsigned>(finalize_row_ctas(p) + finalize_item_ctas(p));
  k2q_finalize_kernel<<<finalize_ctas, kFinalizeThreads, 0, stream>>>(p);
  if (bitmap) {
    // A first column of CTAs, of which CTA (0, 0) lists the routed tiles (whose flags are all
    // written by now) while the others walk: the list costs the plan nothing beside the walk.
    const int list_ctas = p.union_list != nullptr ? 1 : 0;
    const dim3 walk_grid(
        static_cast<unsigned>(std::max<std::int64_t>(1, ceil_div(g.bitmap_units, kBitmapWarps))) + list_ctas,
        bits_grid.y);
    // A walk of one wave waits on each warp's steps: it places by lane wherever that takes
    // fewer steps; a longer one, issue-bound over all its warps, places by lane only sparse
    // words (docs/performance.md steps 66, 67).
    const bool one_wave = static_cast<std::int64_t>(walk_grid.x) * walk_grid.y <= cooperative_resident().walk;
    k2q_walk_kernel<<<walk_grid, kBitmapWarps * 32, 0, stream>>>(
        p, list_ctas, one_wave ? kWalkLaneAnyBits : kWalkLaneMaxBitsBeyondWave);
  } else
    k2q_scatter_kernel<<<unit_grid, unit_threads, g.unit_smem_bytes, stream>>>(p);

  const int tail_ctas =
      static_cast<int>(std::clamp<std::int64_t>(ceil_div(g.edges_per_head * g.h_kv, kTailThreads), 1, kTailMaxCtas));
  const int list_ctas = p.union_list != nullptr && !bitmap ? 1 : 0;
  k2q_finish_kernel<<<static_cast<unsigned>(list_ctas + tail_ctas), kTailThreads, 0, stream>>>(p, list_ctas, tail_ctas);
  MSA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace msa::cuda
