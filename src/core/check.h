// Argument checks that throw msa::Error naming the argument and the value.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "msa/error.h"
#include "msa/tensor.h"

#define MSA_REQUIRE(cond, argument, value, message)        \
  do {                                                     \
    if (!(cond)) throw ::msa::Error((argument), (value), (message)); \
  } while (0)

// An invariant the operator layer established before calling a launcher (launchers assert,
// they do not validate): a failure is a bug of the library, reported as an msa::Error naming
// the condition rather than a kernel reading out of bounds.
#define MSA_ASSERT(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) throw ::msa::Error("internal", #cond, "invariant broken (" __FILE__ ")"); \
  } while (0)

namespace msa {

std::string to_string(DType t);
std::string to_string(Device d);

void check_present(const TensorView& t, const std::string& name);
void check_device(const TensorView& t, const std::string& name, Device device);
void check_dtype(const TensorView& t, const std::string& name, DType dtype);
// The rank first (an invalid rank, outside 0..kMaxRank, is named by its number alone).
void check_rank(const TensorView& t, const std::string& name, int rank);
void check_dim(const TensorView& t, const std::string& name, int i, std::int64_t extent);
// check_dim for each extent in order (the rank is checked first by the caller).
void check_shape(const TensorView& t, const std::string& name,
                 std::initializer_list<std::int64_t> extents);
// Extents >= 0, strides >= 0, the addressed span within 2^63 bytes, the last dim contiguous,
// data aligned to 16 bytes (16-bit tensors) or to the element size, rows of 16-bit tensors on
// 16-byte boundaries, and a null pointer only for zero elements.
void check_layout(const TensorView& t, const std::string& name);
// check_layout plus: no two elements share memory (stride 0 or overlapping rows would make
// the result depend on the order of the writes).
void check_output_layout(const TensorView& t, const std::string& name);
// check_present + device + dtype + rank + layout in one call.
void check_tensor(const TensorView& t, const std::string& name, Device device, DType dtype, int rank);
// The same with the expected extents (rank = extents.size()), checked before the layout so
// that a wrong extent is named as such rather than as the stride it implies.
void check_tensor(const TensorView& t, const std::string& name, Device device, DType dtype,
                  std::initializer_list<std::int64_t> extents);
// An output: check_tensor with extents, then check_output_layout.
void check_output(const TensorView& t, const std::string& name, Device device, DType dtype,
                  std::initializer_list<std::int64_t> extents);
// A rank-1 int32 vector of a batch (cu_seqlens_q, k_len, seq_len, cu_seqlens_k): any extent
// (n < 0) or exactly n elements, and a stride >= 1 (a stride-0 view would repeat one request).
void check_int32_vector(const TensorView& t, const std::string& name, Device device, std::int64_t n = -1);

}  // namespace msa
