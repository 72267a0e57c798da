// One fuzz input's call context (the mutations, the tensors, the operator's parameters and the
// invariant checks on them) and the wrappers every API call goes through.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_tensor.h"

namespace msa_fuzz {

// ---- the call context ------------------------------------------------------------------

struct Mutation {
  int target;
  int field;
  std::int64_t v1;
  std::int64_t v2;
};

class Ctx {
 public:
  Ctx(const Header& h, Reader& r) : h(h), r(r), rng(h.seed ^ (std::uint64_t{h.op} << 40)) {}

  Header h;
  Reader& r;
  Rng rng;
  Tensor T[kNumT];
  std::vector<Mutation> muts;

  msa::AttentionShape shape;  // what the operator gets (post mutations)
  msa::Options opt;
  int page_size = 0;  // 0 = flat
  DType dt = DType::kBF16;

  bool hostile = false;    // some mutation applied: no oracle comparison
  bool extreme = false;    // values beyond the ordinary range somewhere
  bool nonfinite = false;  // NaN/inf in data a call may see
  bool nan_sinks = false;
  bool inf_sinks = false;
  bool huge_sinks = false;

  // Op parameters that mutations may change.
  int q_per_request = 1;
  bool head_major = false;
  int h_i = 1;
  float idx_scale = 0.f;
  int topk_op = 1;
  std::int64_t max_k_len_bound = -1;  // >= 0: plan(batch, topk, max_k_len, stream)

  // Mutations: read from the input after the per-op bytes, applied in stages.
  void read_mutations();
  // Shape mutations flagged "pre" (field bit 7) feed the tensor shapes too; the rest apply to
  // the operator only, after the tensors are built. Values of "pre" mutations are small.
  void apply_shape_mutations(bool pre);
  void apply_option_mutations();
  void apply_tensor_mutations();
  // Allocates and fills every used tensor. False: a span is too large (skip the input).
  bool materialize_all();
  void apply_element_writes();

  // Snapshot of every output allocation, for the "no byte changed" checks.
  void snapshot(std::initializer_list<Tid> outs);
  void expect_unchanged(std::initializer_list<Tid> outs, const char* call, const std::string& why);
  // Invariant g: bytes of an output allocation outside its view's elements are untouched.
  void expect_outside_untouched(std::initializer_list<Tid> outs, const char* call);
  // Invariant f: every present tensor argument of a successful call keeps the layout rules.
  void expect_layout_ok(std::initializer_list<Tid> args, const char* call);

  // Invariant c.
  bool finite_inputs() const { return !nonfinite && (g_allow_nan_sinks ? !nan_sinks : true); }
  bool ordinary() const {
    return !hostile && !extreme && !nonfinite && !nan_sinks && !inf_sinks && !huge_sinks;
  }
  void expect_no_nan(Tid id, const char* call);

 private:
  bool materialize(Tensor& t);
  void fill(Tensor& t);
  float value(int vmode, DType t);
};

// ---- calls -----------------------------------------------------------------------------

enum class Outcome { kOk, kError };

// Runs f; msa::Error is an outcome (checked for naming), anything else is invariant a.
template <class F>
Outcome call(const char* what, F&& f) {
  try {
    f();
    if (g_verbose) std::fprintf(stderr, "msa_fuzz: %s -> ok\n", what);
    return Outcome::kOk;
  } catch (const msa::Error& e) {
    if (g_verbose) std::fprintf(stderr, "msa_fuzz: %s -> %s\n", what, e.what());
    if (e.argument().empty() || e.value().empty())
      fail("b", std::string(what) + ": msa::Error with an empty argument or value: " + e.what());
    return Outcome::kError;
  } catch (const std::exception& e) {
    fail("a", std::string(what) + ": exception other than msa::Error escaped: " + typeid(e).name() +
                  ": " + e.what());
  } catch (...) {
    fail("a", std::string(what) + ": non-std exception escaped");
  }
}

// Same, returning the error's text (for the unchanged-output message).
template <class F>
Outcome call_checked(Ctx& c, const char* what, std::initializer_list<Tid> outs, F&& f) {
  c.snapshot(outs);
  std::string why;
  Outcome o;
  try {
    f();
    o = Outcome::kOk;
  } catch (const msa::Error& e) {
    if (e.argument().empty() || e.value().empty())
      fail("b", std::string(what) + ": msa::Error with an empty argument or value: " + e.what());
    why = e.what();
    o = Outcome::kError;
  } catch (const std::exception& e) {
    fail("a", std::string(what) + ": exception other than msa::Error escaped: " + typeid(e).name() +
                  ": " + e.what());
  } catch (...) {
    fail("a", std::string(what) + ": non-std exception escaped");
  }
  if (g_verbose) std::fprintf(stderr, "msa_fuzz: %s -> %s\n", what, o == Outcome::kOk ? "ok" : why.c_str());
  if (o == Outcome::kError) c.expect_unchanged(outs, what, why);
  else c.expect_outside_untouched(outs, what);
  return o;
}

// Calls a method of a moved-from operator object: an msa::Error or a harmless no-op is fine.
template <class F>
void moved_from_call(const char* what, F&& f) {
  call(what, std::forward<F>(f));
}

}  // namespace msa_fuzz
