#include "tools/table.h"

#include <algorithm>
#include <cstdarg>

namespace msa::tool {

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

void Table::print(std::FILE* out) const {
  std::vector<std::size_t> width(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    width[c] = columns_[c].header.size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  const auto line = [&](const auto& cell_of) {
    std::string text;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      const std::string& cell = cell_of(c);
      const std::string pad(width[c] - cell.size(), ' ');
      const bool last = c + 1 == columns_.size();
      text += columns_[c].right_align ? pad + cell : cell + (last ? "" : pad);
      if (!last) text += "  ";
    }
    std::fprintf(out, "%s\n", text.c_str());
  };
  line([&](std::size_t c) -> const std::string& { return columns_[c].header; });
  for (const auto& row : rows_) line([&](std::size_t c) -> const std::string& { return row[c]; });
}

std::string format(const char* fmt, ...) {
  va_list args, again;
  va_start(args, fmt);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string text(static_cast<std::size_t>(std::max(n, 0)), '\0');
  std::vsnprintf(text.data(), text.size() + 1, fmt, again);
  va_end(again);
  return text;
}

}  // namespace msa::tool
