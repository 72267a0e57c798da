// The host time of one cudaLaunchKernelEx (docs/performance.md, step 70): does a kernel's
// parameter size (8 bytes to 1.3 KB, six 64-byte-aligned CUtensorMap-sized blocks as
// __grid_constant__ like the tile-union kernel's), the programmatic-serialization attribute or a
// large dynamic shared memory size change what an eager call pays on the host per launch?
// Each figure is the mean host time of the launch call alone over 50 launches (after 10), on a
// stream the GPU is busy on (behind a spin kernel) or idle. Not part of the build:
//   nvcc -std=c++17 -O2 -arch=sm_90a scripts/launch_cost.cu -o launch_cost && ./launch_cost
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>

namespace {

template <int N>
struct Bytes {
  char b[N];
};
struct alignas(64) MapSized {
  char b[128];
};
struct Maps {
  MapSized m[6];
};

__global__ void k_small(int x) {
  if (x == 12345) printf("x");
}
template <int N>
__global__ void k_bytes(Bytes<N> p) {
  if (p.b[0] == 123) printf("x");
}
__global__ void k_maps(const __grid_constant__ Maps m, Bytes<512> p) {
  if (p.b[0] == 123 && m.m[0].b[0] == 1) printf("x");
}
__global__ void __launch_bounds__(384, 1) k_maps_smem(const __grid_constant__ Maps m, Bytes<512> p) {
  extern __shared__ char smem[];
  if (p.b[0] == 123 && m.m[0].b[0] == 1) {
    smem[threadIdx.x] = 1;
    printf("%d", smem[5]);
  }
}
__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Mean host microseconds of cudaLaunchKernelEx(kernel, args...) on a 384-thread grid.
template <class Kernel, class... Args>
double launch_us(Kernel kernel, bool programmatic, bool idle, int grid, std::size_t smem, Args... args) {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaLaunchConfig_t c{};
  c.gridDim = dim3(grid);
  c.blockDim = dim3(384);
  c.dynamicSmemBytes = smem;
  c.stream = s;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  c.attrs = programmatic ? &attr : nullptr;
  c.numAttrs = programmatic ? 1 : 0;
  double total = 0.0;
  for (int r = 0; r < 60; ++r) {
    if (!idle) spin<<<1, 1, 0, s>>>(400000);
    const auto t0 = std::chrono::steady_clock::now();
    cudaLaunchKernelEx(&c, kernel, args...);
    const auto t1 = std::chrono::steady_clock::now();
    cudaStreamSynchronize(s);
    if (r >= 10) total += std::chrono::duration<double, std::micro>(t1 - t0).count();
  }
  cudaStreamDestroy(s);
  return total / 50.0;
}

}  // namespace

int main() {
  cudaFree(nullptr);
  const Bytes<64> b64{};
  const Bytes<1024> b1024{};
  const Bytes<512> b512{};
  const Maps maps{};
  cudaFuncSetAttribute(k_maps_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024);
  std::printf("host us per launch: 4 B | 64 B | 1 KB | 6 maps + 512 B | the same, 1 CTA | 220 KB smem\n");
  for (const bool idle : {false, true})
    for (const bool programmatic : {false, true})
      std::printf("%s stream, %s: %.2f | %.2f | %.2f | %.2f | %.2f | %.2f\n", idle ? "idle" : "busy",
                  programmatic ? "programmatic" : "plain", launch_us(k_small, programmatic, idle, 132, 0, 1),
                  launch_us(k_bytes<64>, programmatic, idle, 132, 0, b64),
                  launch_us(k_bytes<1024>, programmatic, idle, 132, 0, b1024),
                  launch_us(k_maps, programmatic, idle, 132, 0, maps, b512),
                  launch_us(k_maps, programmatic, idle, 1, 0, maps, b512),
                  launch_us(k_maps_smem, programmatic, idle, 132, 220 * 1024, maps, b512));
  return 0;
}
