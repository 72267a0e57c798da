#include "tensor_view.h"

#include <cstdint>

#if MSA_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "msa/error.h"

namespace msa::python {

namespace nb = nanobind;

namespace {

// A DLPack dtype as the array libraries name it (int64, float64, uint8, bool, complex64, ...).
std::string dtype_text(const nb::dlpack::dtype& t) {
  using Code = nb::dlpack::dtype_code;
  const char* kind = nullptr;
  switch (static_cast<Code>(t.code)) {
    case Code::Int: kind = "int"; break;
    case Code::UInt: kind = "uint"; break;
    case Code::Float: kind = "float"; break;
    case Code::Bfloat: kind = "bfloat"; break;
    case Code::Complex: kind = "complex"; break;
    case Code::Bool: kind = "bool"; break;
    default: break;
  }
  std::string text = kind == nullptr ? "DLPack type code " + std::to_string(t.code) + ", " : std::string(kind);
  if (kind == nullptr || t.code != static_cast<std::uint8_t>(Code::Bool)) text += std::to_string(t.bits);
  if (kind == nullptr) text += " bits";
  if (t.lanes != 1) text += " x " + std::to_string(t.lanes) + " lanes";
  return text;
}

DType dtype_of(const nb::dlpack::dtype& t, const std::string& name) {
  using Code = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    if (t.code == static_cast<std::uint8_t>(Code::Bfloat) && t.bits == 16) return DType::kBF16;
    if (t.code == static_cast<std::uint8_t>(Code::Float) && t.bits == 16) return DType::kFP16;
    if (t.code == static_cast<std::uint8_t>(Code::Float) && t.bits == 32) return DType::kFP32;
    if (t.code == static_cast<std::uint8_t>(Code::Int) && t.bits == 32) return DType::kInt32;
    if (t.code == static_cast<std::uint8_t>(Code::Float8_E4M3FN) && t.bits == 8) return DType::kFP8E4M3;
  }
  throw Error(name + ".dtype", dtype_text(t),
              "msa takes bfloat16, float16, float32, int32 and float8_e4m3fn (K/V caches, index tensors) tensors");
}

Device device_of(int device_type, const std::string& name) {
  if (device_type == nb::device::cpu::value) return Device::kCpu;
  if (device_type == nb::device::cuda::value) return Device::kCuda;
  throw Error(name + ".device", "DLPack device type " + std::to_string(device_type),
              "msa takes CPU and CUDA tensors");
}

// torch.Tensor and torch.utils.dlpack.to_dlpack, looked up once torch is in sys.modules (msa
// never imports it: before that, no argument can be a torch.Tensor). Kept for the process's life.
struct Torch {
  PyTypeObject* tensor = nullptr;
  PyObject* to_dlpack = nullptr;
};

const Torch* torch_found() noexcept {
  static Torch torch;  // the GIL is held
  if (torch.tensor != nullptr) return &torch;
  PyObject* modules = PyImport_GetModuleDict();
  PyObject* top = PyDict_GetItemString(modules, "torch");  // borrowed
  PyObject* dlpack = PyDict_GetItemString(modules, "torch.utils.dlpack");
  if (top == nullptr || dlpack == nullptr) return nullptr;
  PyObject* tensor = PyObject_GetAttrString(top, "Tensor");
  PyObject* to_dlpack = PyObject_GetAttrString(dlpack, "to_dlpack");
  if (tensor == nullptr || to_dlpack == nullptr || !PyType_Check(tensor)) {
    Py_XDECREF(tensor);
    Py_XDECREF(to_dlpack);
    PyErr_Clear();
    return nullptr;
  }
  torch.tensor = reinterpret_cast<PyTypeObject*>(tensor);
  torch.to_dlpack = to_dlpack;
  return &torch;
}

// The truth of attribute `name` of `o` (called when a method); -1 on any error, cleared.
int flag(PyObject* o, const char* name, bool call) noexcept {
  PyObject* v = call ? PyObject_CallMethod(o, name, nullptr) : PyObject_GetAttrString(o, name);
  const int truth = v == nullptr ? -1 : PyObject_IsTrue(v);
  Py_XDECREF(v);
  if (truth < 0) PyErr_Clear();
  return truth;
}

}  // namespace

nb::object torch_capsule(nb::handle src) noexcept {
  const Torch* torch = torch_found();
  if (torch == nullptr || Py_TYPE(src.ptr()) != torch->tensor) return {};
  // Tensors that Tensor.__dlpack__ refuses (autograd, the negative bit) keep the import they
  // always had: nanobind asks __dlpack__, then falls back to to_dlpack itself.
  if (flag(src.ptr(), "requires_grad", false) != 0 || flag(src.ptr(), "is_neg", true) != 0) return {};
  PyObject* capsule = PyObject_CallOneArg(torch->to_dlpack, src.ptr());
  if (capsule == nullptr) PyErr_Clear();
  return nb::steal(capsule);
}

TensorView to_view(const Array& a, const std::string& name) {
  const auto rank = static_cast<int>(a.ndim());
  if (rank < 1 || rank > kMaxRank)
    throw Error(name + ".ndim", std::to_string(rank), "msa takes tensors of 1 to " + std::to_string(kMaxRank) + " dims");
  TensorView v;
  v.data = static_cast<char*>(a.data_handle()) + a.byte_offset();
  v.dtype = dtype_of(a.dtype(), name);
  v.device = device_of(a.device_type(), name);
#if MSA_WITH_CUDA
  // msa launches on the current device: an array of another device would be read or written
  // through its address from there. (No device visible: the operator reports that instead.)
  if (v.device == Device::kCuda) {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess)
      (void)cudaGetLastError();
    else if (a.device_id() != current)
      throw Error(name + ".device", "cuda:" + std::to_string(a.device_id()),
                  "not the current CUDA device (cuda:" + std::to_string(current) +
                      "), where msa launches: make the array's device current first (torch.cuda.device, "
                      "cupy.cuda.Device)");
  }
#endif
  v.rank = rank;
  for (int i = 0; i < rank; ++i) {
    v.shape[i] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(i)));
    v.stride[i] = a.stride(static_cast<std::size_t>(i));
  }
  return v;
}

TensorView to_view(const ArrayArg& a, const std::string& name) { return to_view(a.array, name); }

TensorView to_view(const std::optional<ArrayArg>& a, const std::string& name) {
  return a.has_value() ? to_view(a->array, name) : TensorView{};
}

TensorView to_output_view(const ArrayArg& a, const std::string& name) {
  if (a.read_only) throw Error(name, "a read-only array", "msa writes it: pass a writable array");
  return to_view(a.array, name);
}

TensorView to_output_view(const std::optional<ArrayArg>& a, const std::string& name) {
  return a.has_value() ? to_output_view(*a, name) : TensorView{};
}

}  // namespace msa::python
