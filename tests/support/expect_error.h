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

// The looser check: the call throws an msa::Error whose text mentions `part` (an argument's
// name where the value is not worth spelling out).
template <class F>
void expect_error_mentioning(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no msa::Error for " << part;
  } catch (const msa::Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an msa::Error: " << e.what();
  }
}

}  // namespace msa::test
