// The msa extension module (msa._msa): the C++ operator objects over DLPack tensors, and
// msa::Error as the Python exception msa.Error (a ValueError) carrying the argument and value.
// The Python package (python/msa/) builds the Pythonic layer and the MSA wrappers on top.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "msa/msa.h"
#include "tensor_view.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace msa::python {
namespace {

PyObject* g_error = nullptr;  // msa.Error

cudaStream_t to_stream(std::uintptr_t handle) { return reinterpret_cast<cudaStream_t>(handle); }

Backend backend_of(const std::string& name) {
  if (name == "cpu") return Backend::kCpu;
  if (name == "cuda") return Backend::kCuda;
  throw Error("backend", name, "expected 'cpu' or 'cuda'");
}

PrefillPath path_of(const std::string& name) {
  if (name == "auto") return PrefillPath::kAuto;
  if (name == "block_major") return PrefillPath::kBlockMajor;
  if (name == "tile_union") return PrefillPath::kTileUnion;
  throw Error("prefill_path", name, "expected 'auto', 'block_major' or 'tile_union'");
}

Options options_of(const std::string& backend, bool strict, int q_per_item, const std::string& prefill_path) {
  Options o;
  o.backend = backend_of(backend);
  o.strict = strict;
  o.q_per_item = q_per_item;
  o.prefill_path = path_of(prefill_path);
  return o;
}

VarlenBatch batch_of(const ArrayArg& cu_seqlens_q, const ArrayArg& k_len) {
  return VarlenBatch{to_view(cu_seqlens_q, "cu_seqlens_q"), to_view(k_len, "k_len")};
}

// The K/V caches and their addressing. kv_nhd: k and v are paged caches stored token-major,
// [num_pages, page_size, h_kv, d] (the wrappers' kv_layout "NHD"), seen here as the
// [num_pages, h_kv, page_size, d] view the operators take (a swap of two extents and strides,
// where a swapaxes in Python costs 1.4 us a cache).
KvCache kv_of(const ArrayArg& k, const ArrayArg& v, const std::optional<ArrayArg>& page_table,
              const std::optional<ArrayArg>& cu_seqlens_k, bool kv_nhd) {
  KvCache kv{to_view(k, "k"), to_view(v, "v"), to_view(page_table, "page_table"),
             to_view(cu_seqlens_k, "cu_seqlens_k")};
  if (kv_nhd) {
    for (auto [view, name] : {std::pair{&kv.k, "k"}, std::pair{&kv.v, "v"}}) {
      if (!view->present()) continue;
      if (view->rank != 4)
        throw Error(std::string(name) + ".ndim", std::to_string(view->rank),
                    "must be 4: [num_pages, page_size, num_kv_heads, head_dim] (kv_layout NHD)");
      std::swap(view->shape[1], view->shape[2]);
      std::swap(view->stride[1], view->stride[2]);
    }
  }
  return kv;
}

// Caller memory as an operator's scratch: a contiguous buffer of any dtype on the backend's
// device (the Python side keeps it alive); None returns to memory the operator allocates itself.
template <class Op>
void set_workspace_of(Op& op, const std::optional<ArrayArg>& arg) {
  if (!arg.has_value()) {
    op.set_workspace(nullptr, 0);
    return;
  }
  if (arg->read_only)
    throw Error("workspace", "a read-only array", "msa writes its scratch there: pass a writable one");
  const Array& b = arg->array;
  const bool on_cuda = b.device_type() == nb::device::cuda::value;
  const bool want_cuda = op.options().backend == Backend::kCuda;
  if (on_cuda != want_cuda)
    throw Error("workspace.device", on_cuda ? "cuda" : "DLPack device type " + std::to_string(b.device_type()),
                std::string("must be ") + (want_cuda ? "a CUDA" : "a CPU") + " buffer for the " +
                    backend_name(op.options().backend) + " backend");
  std::int64_t expect = 1;
  for (std::size_t i = b.ndim(); i-- > 0;) {
    if (b.shape(i) != 1 && b.stride(i) != expect)
      throw Error("workspace.stride[" + std::to_string(i) + "]", std::to_string(b.stride(i)),
                  "the workspace must be one contiguous buffer");
    expect *= static_cast<std::int64_t>(b.shape(i));
  }
  op.set_workspace(static_cast<char*>(b.data_handle()) + b.byte_offset(), b.nbytes());
}

class PySparsePrefill {
 public:
  PySparsePrefill(int h_q, int h_kv, int d, int topk, float scale, const std::string& backend, bool strict,
                  int q_per_item, const std::string& prefill_path)
      : op_(AttentionShape{h_q, h_kv, d, topk, scale}, options_of(backend, strict, q_per_item, prefill_path)) {}

  // With cu_seqlens_k, k_len is first written from it (msa::lengths_from_offsets, on the stream).
  void plan(const ArrayArg& cu_seqlens_q, const ArrayArg& k_len, const ArrayArg& topk,
            std::optional<std::int64_t> max_k_len, std::uintptr_t stream, const std::optional<ArrayArg>& cu_seqlens_k) {
    const TensorView offsets = to_view(cu_seqlens_k, "cu_seqlens_k");
    // With the offsets, k_len is written from them: an output.
    const VarlenBatch batch{to_view(cu_seqlens_q, "cu_seqlens_q"),
                            offsets.present() ? to_output_view(k_len, "k_len") : to_view(k_len, "k_len")};
    const TensorView ids = to_view(topk, "topk");
    nb::gil_scoped_release release;
    if (offsets.present()) lengths_from_offsets(offsets, batch.k_len, to_stream(stream));
    if (max_k_len.has_value()) op_.plan(batch, ids, *max_k_len, to_stream(stream));
    else op_.plan(batch, ids, to_stream(stream));
  }

  void run(const ArrayArg& q, const ArrayArg& k, const ArrayArg& v, const ArrayArg& out, const ArrayArg& cu_seqlens_q,
           const ArrayArg& k_len, const ArrayArg& topk, const std::optional<ArrayArg>& page_table,
           const std::optional<ArrayArg>& cu_seqlens_k, const std::optional<ArrayArg>& sinks,
           const std::optional<ArrayArg>& lse, std::uintptr_t stream, bool kv_nhd) {
    PrefillArgs a;
    a.q = to_view(q, "q");
    a.kv = kv_of(k, v, page_table, cu_seqlens_k, kv_nhd);
    a.batch = batch_of(cu_seqlens_q, k_len);
    a.topk = to_view(topk, "topk");
    a.sinks = to_view(sinks, "sinks");
    a.out = to_output_view(out, "out");
    a.lse = to_output_view(lse, "lse");
    nb::gil_scoped_release release;
    op_.run(a, to_stream(stream));
  }

  void set_workspace(const std::optional<ArrayArg>& buffer) { set_workspace_of(op_, buffer); }

  std::size_t workspace_bytes(std::int64_t batch, std::int64_t total_q, std::int64_t max_k_len) const {
    return SparsePrefill::workspace_bytes(op_.shape(), ProblemSize{batch, total_q, max_k_len}, op_.options());
  }

 private:
  SparsePrefill op_;
};

class PySparseDecode {
 public:
  PySparseDecode(int h_q, int h_kv, int d, int topk, float scale, const std::string& backend, bool strict)
      : op_(AttentionShape{h_q, h_kv, d, topk, scale}, options_of(backend, strict, Options{}.q_per_item, "auto")) {}

  void set_workspace(const std::optional<ArrayArg>& buffer) { set_workspace_of(op_, buffer); }

  void plan(std::int64_t batch, int q_per_request, std::int64_t max_seq_len, std::uintptr_t stream) {
    nb::gil_scoped_release release;
    op_.plan(batch, q_per_request, max_seq_len, to_stream(stream));
  }

  void run(const ArrayArg& q, const ArrayArg& k, const ArrayArg& v, const ArrayArg& out, const ArrayArg& seq_len,
           const ArrayArg& topk, int q_per_request, bool topk_head_major, const std::optional<ArrayArg>& page_table,
           const std::optional<ArrayArg>& cu_seqlens_k, const std::optional<ArrayArg>& sinks,
           const std::optional<ArrayArg>& lse, const std::optional<ArrayArg>& k_descale,
           const std::optional<ArrayArg>& v_descale, std::uintptr_t stream, bool kv_nhd) {
    DecodeArgs a;
    a.q = to_view(q, "q");
    a.kv = kv_of(k, v, page_table, cu_seqlens_k, kv_nhd);
    a.seq_len = to_view(seq_len, "seq_len");
    a.topk = to_view(topk, "topk");
    a.topk_head_major = topk_head_major;
    a.q_per_request = q_per_request;
    a.sinks = to_view(sinks, "sinks");
    a.out = to_output_view(out, "out");
    a.lse = to_output_view(lse, "lse");
    a.k_descale = to_view(k_descale, "k_descale");
    a.v_descale = to_view(v_descale, "v_descale");
    nb::gil_scoped_release release;
    op_.run(a, to_stream(stream));
  }

  std::size_t workspace_bytes(std::int64_t batch, int q_per_request, std::int64_t max_seq_len) const {
    return SparseDecode::workspace_bytes(op_.shape(), ProblemSize{batch, batch * q_per_request, max_seq_len},
                                         op_.options());
  }

 private:
  SparseDecode op_;
};

class PyIndexer {
 public:
  PyIndexer(int h_i, int d, float scale, const std::string& backend, bool strict)
      : op_(h_i, d, scale, options_of(backend, strict, Options{}.q_per_item, "auto")) {}

  void plan(const ArrayArg& cu_seqlens_q, const ArrayArg& k_len, std::uintptr_t stream) {
    const VarlenBatch batch = batch_of(cu_seqlens_q, k_len);
    nb::gil_scoped_release release;
    op_.plan(batch, to_stream(stream));
  }

  void run(const ArrayArg& index_q, const ArrayArg& index_k, const ArrayArg& scores, const ArrayArg& cu_seqlens_q,
           const ArrayArg& k_len, const std::optional<ArrayArg>& page_table,
           const std::optional<ArrayArg>& cu_seqlens_k, std::uintptr_t stream) {
    IndexerArgs a;
    a.index_q = to_view(index_q, "index_q");
    a.index_k = KvCache{to_view(index_k, "index_k"), TensorView{}, to_view(page_table, "page_table"),
                        to_view(cu_seqlens_k, "cu_seqlens_k")};
    a.batch = batch_of(cu_seqlens_q, k_len);
    a.scores = to_output_view(scores, "scores");
    nb::gil_scoped_release release;
    op_.run(a, to_stream(stream));
  }

 private:
  Indexer op_;
};

TopkRanking ranking_of(const std::string& name) {
  if (name == "exact") return TopkRanking::kExact;
  if (name == "quantised16") return TopkRanking::kQuantised16;
  throw Error("ranking", name, "expected 'exact' or 'quantised16'");
}

Options topk_options(const std::string& backend, bool strict, const std::string& ranking) {
  Options o = options_of(backend, strict, Options{}.q_per_item, "auto");
  o.topk_ranking = ranking_of(ranking);
  return o;
}

class PyTopK {
 public:
  PyTopK(int topk, const std::string& backend, bool strict, const std::string& ranking)
      : op_(topk, topk_options(backend, strict, ranking)) {}

  void plan(const ArrayArg& cu_seqlens_q, const ArrayArg& k_len, std::uintptr_t stream) {
    const VarlenBatch batch = batch_of(cu_seqlens_q, k_len);
    nb::gil_scoped_release release;
    op_.plan(batch, to_stream(stream));
  }

  void run(const ArrayArg& scores, const ArrayArg& topk, const ArrayArg& cu_seqlens_q, const ArrayArg& k_len,
           std::uintptr_t stream) {
    TopkArgs a;
    a.scores = to_view(scores, "scores");
    a.batch = batch_of(cu_seqlens_q, k_len);
    a.topk = to_output_view(topk, "topk");
    nb::gil_scoped_release release;
    op_.run(a, to_stream(stream));
  }

 private:
  TopK op_;
};

class PyIndexerTopK {
 public:
  PyIndexerTopK(int h_i, int d, int topk, float scale, const std::string& backend, bool strict)
      : h_i_(h_i), topk_(topk), options_(options_of(backend, strict, Options{}.q_per_item, "auto")),
        op_(h_i, d, topk, scale, options_) {}

  void plan(std::int64_t batch, std::int64_t total_q, std::int64_t max_k_len, std::uintptr_t stream) {
    nb::gil_scoped_release release;
    op_.plan(ProblemSize{batch, total_q, max_k_len}, to_stream(stream));
  }

  void run(const ArrayArg& index_q, const ArrayArg& index_k, const ArrayArg& topk, const ArrayArg& cu_seqlens_q,
           const ArrayArg& k_len, const std::optional<ArrayArg>& page_table,
           const std::optional<ArrayArg>& cu_seqlens_k, std::uintptr_t stream) {
    IndexerTopkArgs a;
    a.index_q = to_view(index_q, "index_q");
    a.index_k = KvCache{to_view(index_k, "index_k"), TensorView{}, to_view(page_table, "page_table"),
                        to_view(cu_seqlens_k, "cu_seqlens_k")};
    a.batch = batch_of(cu_seqlens_q, k_len);
    a.topk = to_output_view(topk, "topk");
    nb::gil_scoped_release release;
    op_.run(a, to_stream(stream));
  }

  std::size_t workspace_bytes(std::int64_t batch, std::int64_t total_q, std::int64_t max_k_len) const {
    return IndexerTopK::workspace_bytes(h_i_, topk_, ProblemSize{batch, total_q, max_k_len}, options_);
  }

 private:
  int h_i_, topk_;
  Options options_;
  IndexerTopK op_;
};

}  // namespace
}  // namespace msa::python

NB_MODULE(_msa, m) {
  using namespace msa::python;
  m.doc() = "msa: MiniMax Sparse Attention for NVIDIA Hopper (C++ operators over DLPack tensors)";

  g_error = PyErr_NewExceptionWithDoc(
      "msa.Error",
      "An argument msa rejects: .argument names it (e.g. 'q.shape[2]'), .value is what it held, "
      ".message says why. A ValueError.",
      PyExc_ValueError, nullptr);
  m.attr("Error") = nb::handle(g_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const msa::Error& e) {
      nb::object err = nb::steal(PyObject_CallFunction(g_error, "s", e.what()));
      if (!err.is_valid()) return;  // the call set a Python error already
      err.attr("argument") = nb::str(e.argument().c_str());
      err.attr("value") = nb::str(e.value().c_str());
      err.attr("message") = nb::str(e.message().c_str());
      PyErr_SetObject(g_error, err.ptr());
    }
  });

  m.def("version", [] { return std::string(msa::version_string()); }, "The library version, 'major.minor.patch'.");
  m.def("grown_workspace_bytes", &msa::grown_workspace_bytes, "need"_a,
        "msa::grown_workspace_bytes: the bytes an operator allocates for a workspace of its own when a plan "
        "needs `need` and it holds fewer (the need, an eighth more up to 256 MiB, in 2 MiB units, at least one).");
  m.def("cuda_available", &msa::cuda_available,
        "True when this build has the CUDA backend and a CUDA device is visible.");
  m.def(
      "lengths_from_offsets",
      [](const ArrayArg& offsets, const ArrayArg& lengths, std::uintptr_t stream) {
        const msa::TensorView o = to_view(offsets, "offsets"), l = to_output_view(lengths, "lengths");
        nb::gil_scoped_release release;
        msa::lengths_from_offsets(o, l, to_stream(stream));
      },
      "offsets"_a, "lengths"_a, "stream"_a = 0,
      "msa::lengths_from_offsets: lengths[b] = offsets[b + 1] - offsets[b] (int32), on the arrays' device.");

  nb::class_<PySparsePrefill>(m, "SparsePrefill", "msa::SparsePrefill: plan(), then run() (spec §1-3).")
      .def(nb::init<int, int, int, int, float, const std::string&, bool, int, const std::string&>(), "h_q"_a, "h_kv"_a,
           "d"_a = 128, "topk"_a = 16, "scale"_a = 0.f, "backend"_a = "cpu", "strict"_a = false,
           "q_per_item"_a = msa::Options{}.q_per_item, "prefill_path"_a = "auto")
      .def("plan", &PySparsePrefill::plan, "cu_seqlens_q"_a, "k_len"_a, "topk"_a, "max_k_len"_a = nb::none(),
           "stream"_a = 0, "cu_seqlens_k"_a = nb::none())
      .def("run", &PySparsePrefill::run, "q"_a, "k"_a, "v"_a, "out"_a, "cu_seqlens_q"_a, "k_len"_a, "topk"_a,
           "page_table"_a = nb::none(), "cu_seqlens_k"_a = nb::none(), "sinks"_a = nb::none(), "lse"_a = nb::none(),
           "stream"_a = 0, "kv_nhd"_a = false)
      .def("set_workspace", &PySparsePrefill::set_workspace, "buffer"_a.none())
      .def("workspace_bytes", &PySparsePrefill::workspace_bytes, "batch"_a, "total_q"_a, "max_k_len"_a);

  nb::class_<PySparseDecode>(m, "SparseDecode", "msa::SparseDecode: plan() from host sizes, then run() (spec §4).")
      .def(nb::init<int, int, int, int, float, const std::string&, bool>(), "h_q"_a, "h_kv"_a, "d"_a = 128,
           "topk"_a = 16, "scale"_a = 0.f, "backend"_a = "cpu", "strict"_a = false)
      .def("plan", &PySparseDecode::plan, "batch"_a, "q_per_request"_a, "max_seq_len"_a, "stream"_a = 0)
      .def("run", &PySparseDecode::run, "q"_a, "k"_a, "v"_a, "out"_a, "seq_len"_a, "topk"_a, "q_per_request"_a,
           "topk_head_major"_a = false, "page_table"_a = nb::none(), "cu_seqlens_k"_a = nb::none(),
           "sinks"_a = nb::none(), "lse"_a = nb::none(), "k_descale"_a = nb::none(), "v_descale"_a = nb::none(),
           "stream"_a = 0, "kv_nhd"_a = false)
      .def("set_workspace", &PySparseDecode::set_workspace, "buffer"_a.none())
      .def("workspace_bytes", &PySparseDecode::workspace_bytes, "batch"_a, "q_per_request"_a, "max_seq_len"_a);

  nb::class_<PyIndexer>(m, "Indexer", "msa::Indexer: per (index head, query, block) the best visible score (spec §5).")
      .def(nb::init<int, int, float, const std::string&, bool>(), "h_i"_a, "d"_a = 128, "scale"_a = 0.f,
           "backend"_a = "cpu", "strict"_a = false)
      .def("plan", &PyIndexer::plan, "cu_seqlens_q"_a, "k_len"_a, "stream"_a = 0)
      .def("run", &PyIndexer::run, "index_q"_a, "index_k"_a, "scores"_a, "cu_seqlens_q"_a, "k_len"_a,
           "page_table"_a = nb::none(), "cu_seqlens_k"_a = nb::none(), "stream"_a = 0);

  nb::class_<PyTopK>(m, "TopK", "msa::TopK: top-k block selection from indexer scores (spec §5).")
      .def(nb::init<int, const std::string&, bool, const std::string&>(), "topk"_a = 16, "backend"_a = "cpu",
           "strict"_a = false, "ranking"_a = "exact")
      .def("plan", &PyTopK::plan, "cu_seqlens_q"_a, "k_len"_a, "stream"_a = 0)
      .def("run", &PyTopK::run, "scores"_a, "topk"_a, "cu_seqlens_q"_a, "k_len"_a, "stream"_a = 0);

  nb::class_<PyIndexerTopK>(m, "IndexerTopK",
                            "msa::IndexerTopK: the indexer and the exact top-k fused, no score written (spec §5).")
      .def(nb::init<int, int, int, float, const std::string&, bool>(), "h_i"_a, "d"_a = 128, "topk"_a = 16,
           "scale"_a = 0.f, "backend"_a = "cpu", "strict"_a = false)
      .def("plan", &PyIndexerTopK::plan, "batch"_a, "total_q"_a, "max_k_len"_a, "stream"_a = 0)
      .def("run", &PyIndexerTopK::run, "index_q"_a, "index_k"_a, "topk"_a, "cu_seqlens_q"_a, "k_len"_a,
           "page_table"_a = nb::none(), "cu_seqlens_k"_a = nb::none(), "stream"_a = 0)
      .def("workspace_bytes", &PyIndexerTopK::workspace_bytes, "batch"_a, "total_q"_a, "max_k_len"_a);
}
