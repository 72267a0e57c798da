// gtest parameter names from case descriptions: gtest accepts only [A-Za-z0-9_] in the name
// INSTANTIATE_TEST_SUITE_P's generator returns, and the name is what CTest lists.
//   case_name("page128 g16 / random-mixed") == "page128_g16_random_mixed"
//   INSTANTIATE_TEST_SUITE_P(Cases, Suite, ::testing::ValuesIn(cases()), msa::test::CaseName{});
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace msa::test {

// Every run of characters outside [A-Za-z0-9_] becomes one '_'; no '_' at either end (a name
// with nothing valid in it becomes "case").
inline std::string case_name(std::string_view description) {
  std::string out;
  bool gap = false;
  for (const char ch : description) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
    if (!ok) {
      gap = true;
      continue;
    }
    if (gap && !out.empty() && out.back() != '_' && ch != '_') out += '_';
    gap = false;
    out += ch;
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  const std::size_t first = out.find_first_not_of('_');
  out.erase(0, first == std::string::npos ? out.size() : first);
  return out.empty() ? "case" : out;
}

// The name generator of a parameterised suite whose parameter has a `name` member.
struct CaseName {
  template <class P>
  std::string operator()(const ::testing::TestParamInfo<P>& info) const {
    return case_name(info.param.name);
  }
};

}  // namespace msa::test
