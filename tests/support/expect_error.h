// The check every validation test makes: the call throws an msa::Error naming this argument and
// this value (anything else, including another exception type, is a failure).
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "msa/error.h"

namespace msa::test {

template <class F>
void expect_error(F&& f, const std::string& argument, const std::string& value) {
  try {
    f();
    ADD_FAILURE() << "no msa::Error; expected one naming " << argument << " = " << value;
  } catch (const msa::Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_EQ(e.value(), value) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an msa::Error: " << e.what();
  }
}

}  // namespace msa::test
