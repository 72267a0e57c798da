// The rows of the validation tables (run by tests/cpu/test_validation.cpp): each mutates the
// valid baseline of its operator (tests/cpu/validation_inputs.h) in one way.
#include <cstdint>
#include <string>
#include <vector>

#include "tests/cpu/validation_inputs.h"
#include "tests/support/host_tensor.h"

namespace msa::test::validation {

namespace {

// Rows named "<Op>_<name>".
struct Rows {
  std::vector<Reject> v;
  void add(Op op, const char* name, Mutation m, std::string argument, std::string value, bool strict = false,
           std::string message = "") {
    v.push_back({op_name(op) + "_" + name, op, m, std::move(argument), std::move(value), std::move(message), strict});
  }
};

std::int32_t* ints(HostTensor& t) { return t.data<std::int32_t>(); }

}  // namespace

std::vector<Reject> rejections() {
  Rows r;
  // ---- attention shape (validate_shape and the SparsePrefill constructor) ----
  r.add(Op::kShape, "HeadsNotDivisible", [](Inputs& in) { in.shape.h_q = 7; }, "shape.h_q", "7");
  r.add(Op::kShape, "GroupAbove16", [](Inputs& in) { in.shape.h_q = 34; }, "shape.h_q / shape.h_kv", "17");
  r.add(Op::kShape, "UnsupportedHeadDim", [](Inputs& in) { in.shape.d = 64; }, "shape.d", "64", false,
        "unsupported head dim");
  r.add(Op::kShape, "TopkZero", [](Inputs& in) { in.shape.topk = 0; }, "shape.topk", "0");
  r.add(Op::kShape, "TopkAbove32", [](Inputs& in) { in.shape.topk = 33; }, "shape.topk", "33");

  // ---- sparse prefill: SparsePrefill::run on paged K/V (pages of 32) ----
  const Op P = Op::kPrefill;
  r.add(P, "QWrongDtype", [](Inputs& in) { in.p.args.q.dtype = DType::kFP32; }, "q.dtype", "fp32");
  r.add(P, "QWrongRank", [](Inputs& in) { in.p.args.q.rank = 2; }, "q.rank", "2 [8, 8]");
  r.add(P, "QWrongHeads", [](Inputs& in) { in.p.args.q.shape[1] = 4; }, "q.shape[1]", "4");
  r.add(P, "QWrongRows", [](Inputs& in) { in.p.args.q.shape[0] = 7; }, "q.shape[0]", "7");
  r.add(P, "QNonContiguousLastDim", [](Inputs& in) { in.p.args.q.stride[2] = 2; }, "q.stride[2]", "2");
  r.add(P, "QMisaligned", [](Inputs& in) {
    in.p.args.q.data = static_cast<char*>(in.p.args.q.data) + 2;
    in.value = std::to_string(reinterpret_cast<std::uintptr_t>(in.p.args.q.data));
  }, "q.data", "(the pointer)");
  r.add(P, "TensorOnWrongDevice", [](Inputs& in) { in.p.args.kv.k.device = msa::Device::kCuda; }, "k.device", "cuda");
  r.add(P, "KLenShorterThanQLen", [](Inputs& in) {
    in.scratch = copy_of(in.p.w.k_len);
    ints(in.scratch)[2] = 2;  // q_len 3
    in.p.args.batch.k_len = in.scratch.view();
  }, "k_len[2]", "2");
  r.add(P, "CuSeqlensQNotStartingAtZero", [](Inputs& in) {
    in.scratch = copy_of(in.p.w.cu_seqlens_q);
    ints(in.scratch)[0] = 1;
    in.p.args.batch.cu_seqlens_q = in.scratch.view();
  }, "cu_seqlens_q[0]", "1");
  r.add(P, "PageTableEntryBeyondPages", [](Inputs& in) { ints(in.p.w.page_table)[0 * 10 + 3] = 12; },  // 12 pages
        "page_table[0, 3]", "12");
  r.add(P, "PageTableEntryNegative", [](Inputs& in) { ints(in.p.w.page_table)[2 * 10 + 0] = -1; },
        "page_table[2, 0]", "-1");
  r.add(P, "PageTableTooNarrow", [](Inputs& in) { in.p.args.kv.page_table.shape[1] = 9; },  // request 0 needs 10
        "page_table.shape[1]", "9");
  r.add(P, "PageTableWrongBatch", [](Inputs& in) { in.p.args.kv.page_table.shape[0] = 2; }, "page_table.shape[0]",
        "2");
  r.add(P, "PageSizeUnsupported", [](Inputs& in) {
    in.p.args.kv.k.shape[2] = 48;
    in.p.args.kv.v.shape[2] = 48;
  }, "k.shape[2]", "48");
  r.add(P, "KvHeadsMismatch", [](Inputs& in) { in.p.args.kv.k.shape[1] = 1; }, "k.shape[1]", "1");
  r.add(P, "KvDtypeMismatch", [](Inputs& in) { in.p.args.kv.k.dtype = DType::kFP16; }, "k.dtype", "fp16");
  r.add(P, "VShapeMismatch", [](Inputs& in) { in.p.args.kv.v.shape[0] = 11; }, "v.shape[0]", "11");
  r.add(P, "VStrideMismatch", [](Inputs& in) {
    // The same buffer seen token-major: valid for k, but v must share k's strides.
    in.p.args.kv.v.stride[1] = 128;
    in.p.args.kv.v.stride[2] = 256;
  }, "v.stride[1]", "128");
  r.add(P, "PagedAndFlatTogether", [](Inputs& in) {
    in.scratch = HostTensor(DType::kInt32, {4});
    in.p.args.kv.cu_seqlens_k = in.scratch.view();
  }, "cu_seqlens_k", "present");
  r.add(P, "OutWrongDtype", [](Inputs& in) { in.p.args.out.dtype = DType::kFP16; }, "out.dtype", "fp16");
  r.add(P, "OutWrongShape", [](Inputs& in) { in.p.args.out.shape[2] = 64; }, "out.shape[2]", "64");
  r.add(P, "LseWrongDtype", [](Inputs& in) { in.p.args.lse.dtype = DType::kBF16; }, "lse.dtype", "bf16");
  r.add(P, "LseWrongShape", [](Inputs& in) { in.p.args.lse.shape[1] = 7; }, "lse.shape[1]", "7");
  r.add(P, "SinksWrongShape", [](Inputs& in) {
    in.scratch = HostTensor(DType::kFP32, {9});
    in.p.args.sinks = in.scratch.view();
  }, "sinks.shape[0]", "9");
  r.add(P, "SinksWrongDtype", [](Inputs& in) { in.p.args.sinks.dtype = DType::kBF16; }, "sinks.dtype", "bf16");
  r.add(P, "TopkWrongShape", [](Inputs& in) { in.p.args.topk.shape[0] = 1; }, "topk.shape[0]", "1");
  r.add(P, "TopkWrongDtype", [](Inputs& in) { in.p.args.topk.dtype = DType::kFP32; }, "topk.dtype", "fp32");
  r.add(P, "StrictContractAtRun", [](Inputs& in) {
    in.scratch = copy_of(in.p.w.topk);
    // Head 1, query 6 (request 2, local 0): a full row is [0, -1, -1, -1].
    ints(in.scratch)[(1 * 8 + 6) * 4 + 1] = 0;
    in.p.args.topk = in.scratch.view();
  }, "topk[1, 6, 1]", "0", /*strict=*/true);

  // ---- sparse prefill on flat K/V ----
  r.add(Op::kPrefillFlat, "CuSeqlensKNotCoveringKLen", [](Inputs& in) { ints(in.p.w.cu_seqlens_k)[1] = 299; },
        "cu_seqlens_k[1]", "299");  // request 0 has k_len 300
  r.add(Op::kPrefillFlat, "CuSeqlensKBeyondTotalK", [](Inputs& in) {
    in.p.args.kv.k.shape[0] = 319;  // cu_seqlens_k[3] = 320
    in.p.args.kv.v.shape[0] = 319;
  }, "cu_seqlens_k[3]", "320");

  // ---- sparse prefill on a device: metadata only (data unreadable there) ----
  r.add(Op::kPrefillCuda, "LseOnHost", [](Inputs& in) { in.p.args.lse.device = msa::Device::kCpu; }, "lse.device",
        "cpu");
  r.add(Op::kPrefillCuda, "TopkRowsFromQ", [](Inputs& in) { in.p.args.topk.shape[1] = 9; },  // total_q = 8
        "topk.shape[1]", "9");
  r.add(Op::kPrefillCuda, "CuSeqlensQWrongShape", [](Inputs& in) { in.p.args.batch.cu_seqlens_q.shape[0] = 3; },
        "cu_seqlens_q.shape[0]", "3");

  // ---- sparse decode (3 requests of Q = 2, query-major top-k [6, 2, 4]) ----
  const Op D = Op::kDecode;
  r.add(D, "SeqLenShorterThanQ", [](Inputs& in) {
    in.scratch = copy_of(in.d.w.k_len);
    ints(in.scratch)[1] = 1;
    in.d.args.seq_len = in.scratch.view();
  }, "seq_len[1]", "1");
  r.add(D, "QRowsNotBTimesQ", [](Inputs& in) { in.d.args.q.shape[0] = 5; }, "q.shape[0]", "5");
  r.add(D, "TopkQueryMajorWrongShape", [](Inputs& in) { in.d.args.topk.shape[1] = 1; }, "topk.shape[1]", "1");
  r.add(D, "TopkLayoutFlagMismatch", [](Inputs& in) { in.d.args.topk_head_major = true; },  // the tensor is [6, 2, 4]
        "topk.shape[0]", "6");
  r.add(D, "StrictNamesTheQueryMajorElement", [](Inputs& in) {
    // Query 3 = request 1, t = 1, position 1, local 0: a full row is [0, -1, -1, -1].
    ints(in.d.query_major)[(3 * 2 + 1) * 4 + 2] = 0;
  }, "topk[3, 1, 2]", "0", /*strict=*/true);
  r.add(Op::kDecodeCheck, "QPerRequestOutOfRange", [](Inputs& in) { in.d.args.q_per_request = 17; }, "q_per_request",
        "17");

  // ---- indexer (2 index heads, scores [2, 8, 3]) ----
  const Op I = Op::kIndexer;
  r.add(I, "ScoresTooNarrow", [](Inputs& in) { in.indexer.scores.shape[2] = 2; }, "scores.shape[2]", "2");
  r.add(I, "ScoresWrongHeads", [](Inputs& in) { in.indexer.scores.shape[0] = 1; }, "scores.shape[0]", "1");
  r.add(I, "IndexQWrongDim", [](Inputs& in) { in.indexer.index_q.shape[2] = 64; }, "index_q.shape[2]", "64");
  r.add(I, "IndexCacheWithTwoHeads", [](Inputs& in) { in.indexer.index_k.k.shape[1] = 2; }, "index_k.k.shape[1]",
        "2");
  r.add(I, "IndexCacheWithValues", [](Inputs& in) { in.indexer.index_k.v = in.w.index_k.view(); }, "index_k.v",
        "present");
  r.add(I, "IndexPageTableOutOfRange", [](Inputs& in) { ints(in.w.page_table)[0] = -2; },
        "index_k.page_table[0, 0]", "-2");

  // ---- top-k selection (width 4) ----
  const Op T = Op::kTopk;
  r.add(T, "ScoresTooNarrow", [](Inputs& in) { in.topk.scores.shape[2] = 2; }, "scores.shape[2]", "2");
  r.add(T, "ScoresWrongRows", [](Inputs& in) { in.topk.scores.shape[1] = 9; }, "scores.shape[1]", "9");
  r.add(T, "OutputWrongWidth", [](Inputs& in) { in.topk.topk.shape[2] = 3; }, "topk.shape[2]", "3");
  r.add(T, "OutputWrongDtype", [](Inputs& in) { in.topk.topk.dtype = DType::kFP32; }, "topk.dtype", "fp32");

  // ---- combine (5 rows, 4 slots) ----
  const Op C = Op::kCombine;
  // fp32, bf16 and fp16 partials are valid (fp16 since the FP16 combine; was the fp16 row).
  r.add(C, "OPartialWrongDtype", [](Inputs& in) { in.combine.o_partial.dtype = DType::kInt32; }, "o_partial.dtype",
        "int32");
  r.add(C, "LsePartialWrongShape", [](Inputs& in) { in.combine.lse_partial.shape[0] = 3; }, "lse_partial.shape[0]",
        "3");
  r.add(C, "SplitCountsWrongShape", [](Inputs& in) { in.combine.split_counts.shape[1] = 1; },
        "split_counts.shape[1]", "1");
  r.add(C, "SplitCountBeyondTopk", [](Inputs& in) { ints(in.counts)[2 * 2 + 1] = 5; }, "split_counts[2, 1]", "5");
  r.add(C, "OutWrongDtype", [](Inputs& in) { in.combine.out.dtype = DType::kFP32; }, "out.dtype", "fp32");
  r.add(C, "SinksWrongShape", [](Inputs& in) {
    in.scratch = HostTensor(DType::kFP32, {4});
    in.combine.sinks = in.scratch.view();
  }, "sinks.shape[0]", "4");
  return r.v;
}

std::vector<Accept> acceptances() {
  const Mutation none = [](Inputs&) {};
  const auto row = [](Op op, const char* name, Mutation m) { return Accept{op_name(op) + "_" + name, op, m}; };
  return {
      row(Op::kShape, "Mha4x4", [](Inputs& in) { in.shape = {.h_q = 4, .h_kv = 4}; }),
      row(Op::kShape, "Gqa64x4", [](Inputs& in) { in.shape = {.h_q = 64, .h_kv = 4}; }),
      row(Op::kShape, "Group16", [](Inputs& in) { in.shape = {.h_q = 16, .h_kv = 1}; }),
      row(Op::kPrefill, "Baseline", none),
      row(Op::kPrefill, "NoLseNoSinks", [](Inputs& in) {
        in.p.args.lse = {};
        in.p.args.sinks = {};
      }),
      row(Op::kPrefill, "TokenMajorPages128", [](Inputs& in) { in.p.load(128, /*token_major=*/true); }),
      row(Op::kPrefillFlat, "Baseline", none),
      row(Op::kPrefill, "UnusedPageTableEntriesAreNotChecked", [](Inputs& in) {
        ints(in.p.w.page_table)[1 * 10 + 5] = 9999;  // request 1 uses only page 0
        ints(in.p.w.page_table)[2 * 10 + 9] = -3;
      }),
      // Every view on the device, a strict breach in topk and a bad page-table entry: unread.
      row(Op::kPrefillCuda, "ChecksMetadataOnly", none),
      row(Op::kDecode, "QueryMajor", none),
      row(Op::kDecode, "HeadMajor", [](Inputs& in) {
        in.d.args.topk = in.d.w.topk.view();
        in.d.args.topk_head_major = true;
      }),
      row(Op::kIndexer, "Baseline", none),
      row(Op::kTopk, "Baseline", none),
      row(Op::kCombine, "Baseline", none),
  };
}

}  // namespace msa::test::validation
