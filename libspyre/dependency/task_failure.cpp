// SPDX-License-Identifier: Apache-2.0
#include "spyre/dependency/task_failure.hpp"

namespace spyre {

const char* ToString(Level level) noexcept {
    switch (level) {
    case Level::CoreGroup: return "CORE_GROUP";
    case Level::Chip: return "CHIP";
    case Level::Host: return "HOST";
    }
    return "?";
}

}  // namespace spyre
