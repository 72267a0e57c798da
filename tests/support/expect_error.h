// The check every validation test makes: the call throws an msa::Error naming this argument and
// this value (anything else, including another exception type, is a failure); optionally its
// message must contain `message_part`.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "msa/error.h"

namespace msa::test {

template <class F>
void expect_error(F&& f, const std::string& argument, const std::string& value,
                  const std::string& message_part = "") {
  try {
    f();
    ADD_FAILURE() << "no msa::Error; expected one naming " << argument << " = " << value;
  } catch (const msa::Error& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_EQ(e.value(), value) << e.what();
    if (!message_part.empty()) {
      EXPECT_NE(e.message().find(message_part), std::string::npos)
          << "message lacks '" << message_part << "': " << e.what();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an msa::Error: " << e.what();
  }
}

}  // namespace msa::test
