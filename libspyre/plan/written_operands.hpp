// SPDX-License-Identifier: Apache-2.0
// Which operands of a program its ops write: each op's last operand
// (uapi/spyre_program.h). The task graph checks a task's parameters
// against it, and the plan reader a manifest's tensor roles.
#pragma once

#include <vector>

#include "spyre/plan/program_image.hpp"

namespace spyre {

// Per operand of `image`: whether an op writes it. Operand indices out of
// range are skipped (the device refuses such a program).
inline std::vector<bool> WrittenOperands(const ProgramImage& image) {
    std::vector<bool> written(image.operands.size(), false);
    for (const spyre_program_op& op : image.ops)
        for (int i = 3; i >= 0; --i)
            if (op.operands[i] != SPYRE_OPERAND_NONE) {
                if (op.operands[i] < written.size()) written[op.operands[i]] = true;
                break;
            }
    return written;
}

}  // namespace spyre
