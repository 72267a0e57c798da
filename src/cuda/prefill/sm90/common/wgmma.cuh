// WGMMA issue of both sm_90a prefill kernels: S = Q K^T from shared memory, O (+)= P V with P
// from registers. The caller fences, arrives and commits.
#pragma once

#include <cute/tensor.hpp>

#include "cuda/common/ptx.cuh"
#include "cuda/prefill/sm90/common/traits.h"

namespace msa::cuda::prefill_sm90 {

// S = Q K^T for this consumer warpgroup's 64 rows (ct: consumer thread 0..255).
template <class Traits, class AccS>
__device__ __forceinline__ void issue_qk(const typename Traits::Element* sq, const typename Traits::Element* sk, int ct,
                                         AccS& acc_s) {
  using namespace cute;
  typename Traits::MmaQK mma;
  auto thr = mma.get_slice(ct);
  using E = typename Traits::Element;
  Tensor sQ = make_tensor(make_smem_ptr(reinterpret_cast<const E*>(sq)), typename Traits::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(reinterpret_cast<const E*>(sk)), typename Traits::SmemLayoutK{});
  Tensor tSrQ = thr.partition_fragment_A(sQ);
  Tensor tSrK = thr.partition_fragment_B(sK);
  mma.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
  for (int k = 0; k < size<2>(tSrQ); ++k) {
    gemm(mma, tSrQ(_, _, k), tSrK(_, _, k), acc_s);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
}

// O += P V (kAccumulate) or O = P V for this consumer warpgroup's 64 rows.
template <class Traits, bool kAccumulate, class FragP, class AccO>
__device__ __forceinline__ void issue_pv(FragP& frag_p, const typename Traits::Element* sv, int ct, AccO& acc_o) {
  using namespace cute;
  typename Traits::MmaPV mma;
  auto thr = mma.get_slice(ct);
  Tensor sV =
      make_tensor(make_smem_ptr(reinterpret_cast<const typename Traits::Element*>(sv)), typename Traits::SmemLayoutV{});
  Tensor tOrV = thr.partition_fragment_B(sV);
  static_assert(decltype(size<2>(tOrV))::value == decltype(size<2>(frag_p))::value);
  mma.accumulate_ = kAccumulate ? GMMA::ScaleOut::One : GMMA::ScaleOut::Zero;
#pragma unroll
  for (int k = 0; k < size<2>(tOrV); ++k) {
    gemm(mma, frag_p(_, _, k), tOrV(_, _, k), acc_o);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
}

// Accumulators of this consumer warpgroup: S [kTileM, kBlockN] and O [kTileM, kHeadDim].
template <class Traits>
__device__ __forceinline__ auto make_acc_s() {
  using namespace cute;
  return partition_fragment_C(typename Traits::MmaQK{}, Shape<Int<Traits::kTileM>, Int<Traits::kBlockN>>{});
}
template <class Traits>
__device__ __forceinline__ auto make_acc_o() {
  using namespace cute;
  return partition_fragment_C(typename Traits::MmaPV{}, Shape<Int<Traits::kTileM>, Int<Traits::kHeadDim>>{});
}

// Register fragment of P as the RS WGMMA's A operand. For 16-bit A the m64k16 register
// layout ((2,2,2) values: k+1, row+8, k+8) equals two consecutive n8 groups of the S
// accumulator, so value i of S (column-major ((2,2,N/8))) is value i of this
// ((2,2,2), 1, N/16) fragment and the conversion is a plain element-wise cast.
template <class Traits>
__device__ __forceinline__ auto make_frag_p() {
  using namespace cute;
  return make_tensor<typename Traits::Element>(Layout<Shape<Shape<_2, _2, _2>, _1, Int<Traits::kBlockN / 16>>>{});
}

// The tile rows of this thread's two accumulator row halves (ct: consumer thread 0..255).
template <class Traits>
__device__ __forceinline__ void accumulator_rows(int ct, int (&row)[2]) {
  using namespace cute;
  typename Traits::MmaQK mma;
  Tensor tScS = mma.get_slice(ct).partition_C(make_identity_tensor(Shape<Int<Traits::kTileM>, Int<Traits::kBlockN>>{}));
#pragma unroll
  for (int half = 0; half < 2; ++half) row[half] = get<0>(tScS(2 * half));
}

}  // namespace msa::cuda::prefill_sm90
