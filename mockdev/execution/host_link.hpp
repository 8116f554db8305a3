// SPDX-License-Identifier: Apache-2.0
//
// The order the host puts between the device's threads. A device thread
// posts a completion (a release store into shared memory); the host sees it
// and rings a doorbell (a release store the device reads with acquire); the
// thread serving that doorbell then touches what the first one wrote. That
// is a happens-before edge, but it runs through another process, so
// ThreadSanitizer, which sees this process only, took the two threads'
// accesses to device memory for a race (a COPY_INLINE writing a program, then
// a core loading it for a task). The device tells it about the edge at its
// two ends: Published() where a device thread hands something to the host,
// Observed() where it acts on something the host handed it. One link per
// card, whose memory the host orders; outside TSan builds both are empty.
//
// An edge exists only where the host really went from one end to the other:
// the annotation joins a release to an acquire that came after it in time, so
// accesses the host did not order (a doorbell rung before the completion it
// should have waited for) are still reported.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define SPYRE_MOCKDEV_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SPYRE_MOCKDEV_TSAN 1
#endif
#endif

#ifdef SPYRE_MOCKDEV_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace spyre::mockdev {

class HostLink {
public:
    // Before a store the host may act on: a completion, a semaphore write,
    // the end of a trapped access.
    void Published() {
#ifdef SPYRE_MOCKDEV_TSAN
        __tsan_release(this);
#endif
    }
    // After a load of what the host stored: a doorbell, a semaphore, the
    // start of a trapped access.
    void Observed() {
#ifdef SPYRE_MOCKDEV_TSAN
        __tsan_acquire(this);
#endif
    }
};

}  // namespace spyre::mockdev
