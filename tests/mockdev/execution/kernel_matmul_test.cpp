// SPDX-License-Identifier: Apache-2.0
// How the device splits a matmul across the card's cores: a small one runs
// on one core (handing it to the workers costs a futex round trip, more than
// their share saves: LaunchTiled's 32^3 tiles took 35-105 us each that way),
// a large one gives every worker a whole number of chunks, and converted
// operands keep their scratch bounded.
#include <gtest/gtest.h>

#include "execution/kernels.hpp"

using namespace spyre::mockdev;

TEST(MatmulPlan, ASmallMatmulIsOneChunk) {
    for (unsigned workers : {2u, 8u, 32u}) {
        const MatmulPlan tile = PlanMatmul(32, 32, 32, true, workers);
        EXPECT_EQ(tile.chunks, 1u) << workers << " workers";
        EXPECT_EQ(tile.rows_per_chunk, 32u);
        // Just under the threshold (2 MFLOP): still one.
        EXPECT_EQ(PlanMatmul(64, 128, 127, true, workers).chunks, 1u);
    }
}

TEST(MatmulPlan, ALargeMatmulGivesEveryWorkerItsShare) {
    // The overlap benchmark's chunk, 134 MFLOP.
    const MatmulPlan p2 = PlanMatmul(1024, 256, 256, true, 2);
    EXPECT_EQ(p2.chunks, 2u);
    EXPECT_EQ(p2.rows_per_chunk, 512u);
    const MatmulPlan p8 = PlanMatmul(1024, 256, 256, true, 8);
    EXPECT_EQ(p8.chunks, 8u);
    // Just over the threshold: every worker.
    EXPECT_EQ(PlanMatmul(64, 128, 129, true, 2).chunks, 2u);
    // Fewer rows than workers: one row a chunk.
    EXPECT_EQ(PlanMatmul(4, 1024, 1024, true, 8).chunks, 4u);
}

TEST(MatmulPlan, ChunksCoverEveryRowAndConvertedOperandsStayBounded) {
    for (uint64_t m : {1u, 7u, 300u, 1000u, 5000u})
        for (bool direct : {true, false}) {
            const MatmulPlan p = PlanMatmul(m, 512, 512, direct, 4);
            EXPECT_GE(p.rows_per_chunk * p.chunks, m);
            EXPECT_LT(p.rows_per_chunk * (p.chunks - 1), m) << "an empty chunk";
            if (!direct) {
                EXPECT_LE(p.rows_per_chunk, 256u);
                EXPECT_LE(p.nb, 512u);
                EXPECT_LE(p.kb, 512u);
            }
        }
}
