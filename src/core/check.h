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

namespace msa {

std::string to_string(DType t);
std::string to_string(Device d);

void check_present(const TensorView& t, const std::string& name);
void check_device(const TensorView& t, const std::string& name, Device device);
void check_dtype(const TensorView& t, const std::string& name, DType dtype);
void check_rank(const TensorView& t, const std::string& name, int rank);
void check_dim(const TensorView& t, const std::string& name, int i, std::int64_t extent);
// check_dim for each extent in order (the rank is checked first by the caller).
void check_shape(const TensorView& t, const std::string& name,
                 std::initializer_list<std::int64_t> extents);
// Last dim contiguous, strides non-negative, data aligned to 16 bytes (16-bit tensors) or to
// the element size, and a null pointer only for zero elements.
void check_layout(const TensorView& t, const std::string& name);
// check_present + device + dtype + rank + layout in one call.
void check_tensor(const TensorView& t, const std::string& name, Device device, DType dtype, int rank);

}  // namespace msa
