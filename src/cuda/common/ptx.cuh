// Device intrinsics shared by every kernel family: named barriers, fast exp2, quad reductions,
// an opaque thread index, a warp-uniform broadcast, an L1 prefetch, ring phases and programmatic
// dependent launch (griddepcontrol).
#pragma once

#include <cstdint>

namespace msa::cuda {

// bar.sync / bar.arrive on a named barrier (ids come from each kernel's Barrier enum; 0 is
// __syncthreads).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// 2^x with ex2.approx (exp2(-inf) = +0, which the masking relies on).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Max / sum over the 4 lanes of a quad (the lanes sharing a row of a WGMMA accumulator).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// threadIdx.x, opaque to the compiler: values derived from it are recomputed where used
// instead of being hoisted out of a persistent loop and kept live (or spilled) across it.
__device__ __forceinline__ int opaque_tid() {
  int tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  return tid;
}

// x as lane 0 holds it, which ptxas treats as warp-uniform: values derived from it (shared
// memory addresses, WGMMA descriptors) go to uniform registers. A ring stage computed from a
// loop counter whose loop bound came from shared memory otherwise stays per-thread, and each
// WGMMA's descriptor then waits on an R2UR move (seen in the tile-union consumers' SASS).
// The warp must be converged.
__device__ __forceinline__ int warp_uniform(int x) { return __shfl_sync(0xffffffffu, x, 0); }

// Asks L1 for the line holding *p (no register written, no wait; a hint the hardware may drop).
__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p)); }

// Parity of the phase a 2-deep ring or buffer pair is in at its use-th use (counts wrap).
__device__ __forceinline__ std::uint32_t phase_of(std::uint32_t use) { return (use >> 1) & 1u; }

// Programmatic dependent launch: wait for the previous kernel's writes before reading its
// outputs; let the next kernel on the stream start its prologue.
__device__ __forceinline__ void wait_for_previous_grid() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void allow_next_grid() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

}  // namespace msa::cuda
