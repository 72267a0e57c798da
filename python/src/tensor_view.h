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

// An array argument of the operators' plan() and run(): imported as nanobind imports any
// ndarray, except that a plain torch.Tensor is exported by torch.utils.dlpack.to_dlpack (see
// the caster below). Holds the import until the call returns. A read-only array (a NumPy array
// with writeable=False, a broadcast view) is taken too: msa only reads its inputs, and an
// output given one is an msa::Error (to_output_view).
struct ArrayArg {
  Array array;
  bool read_only = false;
};

// A capsule of a plain torch.Tensor `src` (exact type, no autograd, no negative bit), made by
// torch.utils.dlpack.to_dlpack; an invalid object for anything else or on any failure (no
// Python error left set). Tensor.__dlpack__(), which nanobind calls otherwise, runs Python-level
// checks that cost about 3 us a tensor, against 0.3 us for the capsule (torch 2.11): 8 tensors
// made a third of a small prefill's run() from Python.
nanobind::object torch_capsule(nanobind::handle src) noexcept;

TensorView to_view(const Array& a, const std::string& name);
TensorView to_view(const ArrayArg& a, const std::string& name);
// An absent optional argument is an absent view (rank 0).
TensorView to_view(const std::optional<ArrayArg>& a, const std::string& name);
// The same for an array msa writes: a read-only one is an msa::Error naming it.
TensorView to_output_view(const ArrayArg& a, const std::string& name);
TensorView to_output_view(const std::optional<ArrayArg>& a, const std::string& name);

}  // namespace msa::python

NAMESPACE_BEGIN(NB_NAMESPACE)
NAMESPACE_BEGIN(detail)

template <>
struct type_caster<msa::python::ArrayArg> {
  NB_TYPE_CASTER(msa::python::ArrayArg, const_name("ndarray"))

  // Flags is uint8_t or uint32_t, as the nanobind version has it.
  template <class Flags>
  bool from_python(handle src, Flags flags, cleanup_list* cleanup) noexcept {
    make_caster<msa::python::Array> inner;
    if (object capsule = msa::python::torch_capsule(src);
        capsule.is_valid() && inner.from_python(capsule, flags, cleanup)) {
      value.array = std::move(inner.value);
      return true;
    }
    if (inner.from_python(src, flags, cleanup)) {
      value.array = std::move(inner.value);
      value.read_only = false;
      return true;
    }
    make_caster<nanobind::ndarray<nanobind::ro>> read_only;
    if (!read_only.from_python(src, flags, cleanup)) return false;
    value.array = msa::python::Array(read_only.value);
    value.read_only = true;
    return true;
  }
};

NAMESPACE_END(detail)
NAMESPACE_END(NB_NAMESPACE)
