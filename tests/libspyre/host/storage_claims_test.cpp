// SPDX-License-Identifier: Apache-2.0
// Which Workers may touch a storage's bytes at once (libspyre/host/
// storage_claims): readers share, a write excludes other Workers' readers
// and writers of the same bytes, disjoint spans never conflict, one Worker
// never conflicts with itself, and a Worker's spans empty once its last
// access ends.
#include "host/storage_claims.hpp"

#include <gtest/gtest.h>

using namespace spyre::host;

namespace {
int kA, kB;  // two addresses: two Workers
const void* const A = &kA;
const void* const B = &kB;
}  // namespace

TEST(HostStorageClaims, ReadersShareAndAWriteExcludesOtherWorkers) {
    StorageClaims c;
    EXPECT_TRUE(c.TryClaim(A, 0, 100, false));
    EXPECT_TRUE(c.TryClaim(B, 50, 150, false));    // reads share
    EXPECT_FALSE(c.TryClaim(B, 90, 95, true));      // a write over A's reads
    EXPECT_TRUE(c.TryClaim(A, 0, 10, true));        // A against itself: its tracker orders it
    EXPECT_FALSE(c.TryClaim(B, 5, 6, false));       // a read under A's write
    EXPECT_FALSE(c.TryClaim(A, 140, 141, true));    // A writing B's reads
    EXPECT_TRUE(c.TryClaim(B, 150, 200, true));     // bytes nobody else uses
}

TEST(HostStorageClaims, DisjointWritesOfTwoWorkersAreFine) {
    StorageClaims c;
    EXPECT_TRUE(c.TryClaim(A, 0, 64, true));
    EXPECT_TRUE(c.TryClaim(B, 64, 128, true));
    EXPECT_TRUE(c.TryClaim(A, 32, 64, false));
    EXPECT_FALSE(c.TryClaim(A, 63, 65, false));
}

TEST(HostStorageClaims, ASpanGrowsWhileAccessesAreInFlightAndEmptiesWithTheLast) {
    StorageClaims c;
    EXPECT_TRUE(c.TryClaim(A, 0, 10, true));
    EXPECT_TRUE(c.TryClaim(A, 90, 100, true));
    // A bound of A's writes: [0, 100), the bytes between included.
    EXPECT_FALSE(c.TryClaim(B, 50, 60, false));
    c.Release(A);
    EXPECT_FALSE(c.TryClaim(B, 50, 60, false));  // one access of A is still in flight
    c.Release(A);
    EXPECT_TRUE(c.TryClaim(B, 50, 60, true));
    EXPECT_FALSE(c.TryClaim(A, 0, 100, false));
    c.Release(B);
    EXPECT_TRUE(c.TryClaim(A, 0, 100, false));
    c.Release(B);  // nothing of B's in flight: ignored
    EXPECT_FALSE(c.TryClaim(B, 0, 1, true));
}
