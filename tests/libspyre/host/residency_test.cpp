// SPDX-License-Identifier: Apache-2.0
// The host level's residency map (libspyre/host/residency): which device
// holds a current copy of which range, and when the ranges of storages
// nobody holds go. A run's end sweeps only once the map has doubled since
// the last sweep: sweeping at every run end walked every storage ever used
// and still held, so each small run cost time in proportion to them.
#include "host/residency.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

using namespace spyre;
using namespace spyre::host;

TEST(HostResidency, ACopyIsCurrentUntilAWriteElsewhere) {
    Residency r;
    const HostTensor t = HostTensor::Zeros({4, 4});
    r.Copied(t, 0);
    EXPECT_TRUE(r.Current(t, 0));
    EXPECT_FALSE(r.Current(t, 1));
    r.Wrote(t.Rows(1, 2), 1);
    EXPECT_FALSE(r.Current(t, 0));
    EXPECT_TRUE(r.Current(t.Rows(1, 2), 1));
}

TEST(HostResidency, ARunsEndSweepsOnlyOnceTheMapHasDoubled) {
    Residency r;
    std::vector<HostTensor> held;
    for (int i = 0; i < 100; ++i) {
        held.push_back(HostTensor::Zeros({1, 4}));
        r.Copied(held.back(), 0);
    }
    r.Sweep();
    ASSERT_EQ(r.storages(), 100u);
    for (int i = 0; i < 150; ++i) r.Copied(HostTensor::Zeros({1, 4}), 0);  // used once, let go at once
    r.SweepIfGrown();
    EXPECT_EQ(r.storages(), 250u) << "under 2 x 100 + 64: no walk";
    for (int i = 0; i < 20; ++i) r.Copied(HostTensor::Zeros({1, 4}), 0);
    r.SweepIfGrown();
    EXPECT_EQ(r.storages(), 100u) << "the held ones stay, the others go";
    for (const HostTensor& t : held) EXPECT_TRUE(r.Current(t, 0));
}

// The ranges are kept ordered (a program over 10,000 row views of one
// tensor on 4 devices kept 40,000 ranges, each lookup walked them all, and
// every run over kept copies cost more than the last). Against the rule
// they implement, on random writes and copies of ranges of every length,
// the whole tensor's included: a write drops exactly the ranges
// that overlap it, on every device, and keeps the rest.
TEST(HostResidency, AWriteDropsExactlyTheRangesThatOverlapIt) {
    struct Range {
        int64_t row0, row1;
        size_t device;
    };
    constexpr int64_t kRows = 64;
    const HostTensor t = HostTensor::Zeros({kRows, 2});
    auto view = [&](int64_t r0, int64_t r1) { return t.Rows(r0, r1); };
    Residency r;
    std::vector<Range> model;  // the rule, kept the plain way
    auto overlaps = [](const Range& a, int64_t r0, int64_t r1) { return a.row0 < r1 && r0 < a.row1; };
    uint32_t seed = 12345;
    auto next = [&](uint32_t n) {
        seed = seed * 1664525u + 1013904223u;
        return (seed >> 8) % n;
    };
    for (int step = 0; step < 4000; ++step) {
        int64_t r0 = next(kRows), r1 = next(kRows);
        if (r0 > r1) std::swap(r0, r1);
        ++r1;  // rows [r0, r1): a view holds one row at least
        if (next(20) == 0) r0 = 0, r1 = kRows;  // now and then the whole tensor
        const size_t device = next(4);
        if (next(3) == 0) {
            const size_t by = next(5) == 0 ? Residency::kHost : device;
            r.Wrote(view(r0, r1), by);
            std::erase_if(model, [&](const Range& m) { return overlaps(m, r0, r1); });
            if (by != Residency::kHost) model.push_back({r0, r1, by});
        } else {
            r.Copied(view(r0, r1), device);
            model.push_back({r0, r1, device});
        }
        if (step % 97 != 0) continue;
        for (int64_t a = 0; a < kRows; a += 3)
            for (int64_t b = a + 1; b <= kRows; b += 5)
                for (size_t d = 0; d < 4; ++d) {
                    const bool want = std::any_of(model.begin(), model.end(), [&](const Range& m) {
                        return m.row0 == a && m.row1 == b && m.device == d;
                    });
                    ASSERT_EQ(r.Current(view(a, b), d), want) << "step " << step << ": rows [" << a << ", " << b
                                                              << ") on device " << d;
                }
    }
}
