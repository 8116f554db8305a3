/* SPDX-License-Identifier: Apache-2.0 */
/* Seed 004's Example 1, verbatim (example1_verbatim.c), and a checker that
 * runs it at depth 0 over and over as the seed's orchestration thread
 * would. */
#ifndef SPYRE_TEST_EXAMPLE1_VERBATIM_H
#define SPYRE_TEST_EXAMPLE1_VERBATIM_H

#include "spyre/pto.h"

#ifdef __cplusplus
extern "C" {
#endif
void simple_orch_verbatim(Runtime* rt, uint64_t* args);
#ifdef __cplusplus
}
#endif

#endif
