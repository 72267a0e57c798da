#pragma once

namespace msa {
inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 1;
inline constexpr int kVersionPatch = 0;
const char* version_string();  // "0.1.0"
}  // namespace msa
