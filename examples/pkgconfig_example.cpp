// SPDX-License-Identifier: Apache-2.0
// Built against an installed libspyre with `pkg-config --cflags --libs libspyre`.
#include <cstdio>

#include <spyre/spyre.hpp>

int main() {
    const unsigned contract = spyre::ContractVersion();
    std::printf("libspyre %s, contract %u.%u\n", spyre::Version(), SPYRE_VERSION_GET_MAJOR(contract),
                SPYRE_VERSION_GET_MINOR(contract));
    // Errors are typed, and an app catches them by type: a missing device
    // root is NotFound, with the path, thrown from inside libspyre.so.
    try {
        spyre::Host::Open(spyre::HostOptions::DeviceRootAt("/nonexistent/spyre-root"));
    } catch (const spyre::Error& e) {
        std::printf("typed error ok: %s\n", spyre::ToString(e.kind()));
        return e.kind() == spyre::ErrorKind::NotFound ? 0 : 1;
    }
    return 1;
}
