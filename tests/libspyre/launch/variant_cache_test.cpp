// SPDX-License-Identifier: Apache-2.0
// The per-Operation cache of tiling plans (launch/variant_cache.hpp): one
// plan per distinct set of shapes, strides and dtypes, made once and shared;
// a planning error keeps nothing; threads asking at once share one plan.
// (The variant programs' cache is tested through LaunchTiled in
// launch_binding_test.)
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "launch/variant_cache.hpp"
#include "spyre/error.hpp"

using namespace spyre;
using namespace spyre::detail;

namespace {

std::vector<TiledTensor> Tensors(int64_t rows, int64_t row_stride = 32, DType dtype = DType::FP32) {
    return {TiledTensor{{rows, 32}, {row_stride, 1}, dtype}, TiledTensor{{32, 32}, {32, 1}, dtype},
            TiledTensor{{rows, 32}, {32, 1}, dtype}};
}

// A planner that counts its calls and marks its plan with the call's number.
struct CountingPlanner {
    std::atomic<int> calls{0};
    TilingPlan operator()() {
        TilingPlan p;
        p.loops.push_back(TileLoop{.loop = 0, .extent = 100 + calls.fetch_add(1)});
        return p;
    }
};

}  // namespace

TEST(TilingPlanCache, SameTensorsPlanOnceAndShareThePlan) {
    TilingPlanCache cache;
    CountingPlanner planner;
    const auto t = Tensors(128);
    const auto first = cache.Get(t, [&] { return planner(); });
    const auto again = cache.Get(t, [&] { return planner(); });
    EXPECT_EQ(planner.calls.load(), 1);
    EXPECT_EQ(first.get(), again.get());
    EXPECT_EQ(cache.size(), 1u);
}

TEST(TilingPlanCache, AnotherShapeStrideOrDtypeIsAnotherPlan) {
    TilingPlanCache cache;
    CountingPlanner planner;
    auto get = [&](const std::vector<TiledTensor>& t) { return cache.Get(t, [&] { return planner(); }); };
    const auto base = get(Tensors(128));
    const auto rows = get(Tensors(96));
    const auto stride = get(Tensors(128, 64));
    const auto dtype = get(Tensors(128, 32, DType::FP16));
    EXPECT_EQ(planner.calls.load(), 4);
    EXPECT_EQ(cache.size(), 4u);
    EXPECT_NE(base.get(), rows.get());
    EXPECT_NE(base.get(), stride.get());
    EXPECT_NE(base.get(), dtype.get());
    EXPECT_EQ(get(Tensors(96)).get(), rows.get());
    EXPECT_EQ(planner.calls.load(), 4);
}

TEST(TilingPlanCache, APlanningErrorKeepsNothing) {
    TilingPlanCache cache;
    const auto t = Tensors(128);
    EXPECT_THROW(cache.Get(t, []() -> TilingPlan { throw Error(ErrorKind::Unsupported, "cannot tile"); }), Error);
    EXPECT_EQ(cache.size(), 0u);
    CountingPlanner planner;
    const auto plan = cache.Get(t, [&] { return planner(); });
    EXPECT_EQ(planner.calls.load(), 1);
    EXPECT_EQ(plan->loops.at(0).extent, 100);
}

TEST(TilingPlanCache, ThreadsAskingAtOnceShareOnePlan) {
    TilingPlanCache cache;
    CountingPlanner planner;
    const auto t = Tensors(256);
    std::vector<std::shared_ptr<const TilingPlan>> got(4);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < got.size(); ++i)
        threads.emplace_back([&, i] {
            for (int k = 0; k < 200; ++k) got[i] = cache.Get(t, [&] { return planner(); });
        });
    for (auto& th : threads) th.join();
    for (const auto& p : got) EXPECT_EQ(p.get(), got[0].get());
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_GE(planner.calls.load(), 1);  // two may plan at once; one plan is kept
}
