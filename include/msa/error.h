// msa::Error: every rejected input and every failed call surfaces as one of these.
#pragma once

#include <stdexcept>
#include <string>

namespace msa {

// An error that names what failed: the argument (e.g. "topk[1, 7, 3]"), the offending value
// (e.g. "-5"), and a sentence saying what was expected. what() joins the three:
//   "msa: topk[1, 7, 3] = 99: block id beyond the query's local block 4 (strict mode)"
class Error : public std::runtime_error {
 public:
  Error(std::string argument, std::string value, std::string message)
      : std::runtime_error("msa: " + argument + " = " + value + ": " + message),
        argument_(std::move(argument)),
        value_(std::move(value)),
        message_(std::move(message)) {}

  const std::string& argument() const noexcept { return argument_; }
  const std::string& value() const noexcept { return value_; }
  const std::string& message() const noexcept { return message_; }

 private:
  std::string argument_;
  std::string value_;
  std::string message_;
};

}  // namespace msa
