#include "cuda/api/host_mirrors.h"

#include "cuda/common/check.h"

namespace msa::cuda {

TensorView HostMirrors::mirror(const TensorView& t, cudaStream_t stream) {
  if (!t.present() || t.device == Device::kCpu) return t;
  if (t.numel() == 0) return as_host(t);  // nothing to copy, but a host view all the same
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

void HostMirrors::wait(cudaStream_t stream) { MSA_CUDA_CHECK(cudaStreamSynchronize(stream)); }

TensorView as_host(TensorView t) {
  if (t.present()) t.device = Device::kCpu;
  return t;
}

bool contiguous_vector(const TensorView& t) { return t.dim(0) <= 1 || t.stride[0] == 1; }

void copy_to_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes > 0) MSA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}

void stage_int32_3d(const TensorView& t, std::int32_t* dst, cudaStream_t stream) {
  const std::size_t count = static_cast<std::size_t>(t.numel());
  if (t.is_contiguous()) {
    copy_to_device(dst, t.data, count * sizeof(std::int32_t), stream);
    return;
  }
  std::vector<std::int32_t> packed(count);
  const auto* src = t.ptr<const std::int32_t>();
  std::size_t i = 0;
  for (std::int64_t a = 0; a < t.dim(0); ++a)
    for (std::int64_t b = 0; b < t.dim(1); ++b)
      for (std::int64_t c = 0; c < t.dim(2); ++c) packed[i++] = src[t.offset(a, b, c)];
  copy_to_device(dst, packed.data(), count * sizeof(std::int32_t), stream);
}

}  // namespace msa::cuda
