// A plain-text table: columns sized to their widest cell, numbers right-aligned.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace msa::tool {

class Table {
 public:
  struct Column {
    std::string header;
    bool right_align = false;
  };
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

  // One cell per column; a short row is padded with empty cells.
  void add_row(std::vector<std::string> cells);
  void print(std::FILE* out) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace msa::tool
