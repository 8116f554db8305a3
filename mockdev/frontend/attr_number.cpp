// SPDX-License-Identifier: Apache-2.0
#include "frontend/attr_number.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>

namespace spyre::mockdev {

int ParseAttrNumber(const char* buf, size_t size, unsigned long* out) {
    std::string text(buf, size);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return -EINVAL;
    if (text.find('\0') != std::string::npos) return -EINVAL;  // strtoul would stop there silently
    char* end = nullptr;
    errno = 0;
    unsigned long v = std::strtoul(text.c_str(), &end, 0);
    if (*end != '\0') return -EINVAL;
    if (errno == ERANGE) return -ERANGE;
    *out = v;
    return 0;
}

}  // namespace spyre::mockdev
