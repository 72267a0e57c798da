// Tensors from Python: any object with __dlpack__ (PyTorch, CuPy, JAX; NumPy on the CPU) arrives
// as a nanobind ndarray and is seen, without a copy, as an msa::TensorView with the same data
// pointer, dtype, device, shape and strides. What msa cannot describe (a dtype or device it does
// not know, more dims than kMaxRank) is an msa::Error naming the argument.
#pragma once

#include <nanobind/ndarray.h>

#include <optional>
#include <string>

#include "msa/tensor.h"

namespace msa::python {

using Array = nanobind::ndarray<>;

TensorView to_view(const Array& a, const std::string& name);
// An absent optional argument is an absent view (rank 0).
TensorView to_view(const std::optional<Array>& a, const std::string& name);

}  // namespace msa::python
