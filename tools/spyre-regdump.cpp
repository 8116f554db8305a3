// SPDX-License-Identifier: Apache-2.0
// spyre-regdump: print every register of a live spyre function by name, with
// decoded fields. Reads through the sysfs-like resource files, so it works
// while an app holds the function's device node.
#include <CLI/CLI.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "spyre/common/log.hpp"
#include "spyre/driver/device_environment.hpp"
#include "spyre/driver/discovery.hpp"
#include "spyre/driver/register_dump.hpp"
#include "spyre/error.hpp"

namespace fs = std::filesystem;
using spyre::driver::DeviceRoot;
using spyre::driver::FunctionInfo;

namespace {

// Accepts MOUNT/dev/spyre/<addr>, MOUNT/bus/pci/devices/<addr>[/file], a PCI
// address or an index (looked up under SPYRE_DEV_ROOT or /run/spyre).
FunctionInfo Resolve(const std::string& target) {
    if (auto info = spyre::driver::FunctionAtPath(target)) return *info;
    const char* env = std::getenv("SPYRE_DEV_ROOT");
    DeviceRoot root(env && *env ? env : spyre::driver::kDefaultDeviceRoot);
    return root.Find(target);
}

constexpr double kMaxWatchSeconds = 86400;  // as spyre-smi --loop

}  // namespace

int main(int argc, char** argv) {
    spyre::log::SetProgram("spyre-regdump", spyre::log::Level::Warn);
    CLI::App app{"Print every register of a live spyre function, by name and decoded."};
    std::string target;
    double watch = 0;
    // An empty name is a usage error too, not a function that cannot be found.
    const CLI::Validator named(
        [](const std::string& text) -> std::string {
            return text.empty() ? "the function is empty: name a device node, function directory, PCI address or index"
                                : std::string();
        },
        "FUNCTION");
    // Required, checked after the parse: CLI11 reports a missing positional
    // before an unknown option, so "--bogus" alone read "function is required".
    CLI::Option* function = app.add_option("function", target, "device node, function directory, PCI address or index")
                                ->check(named);
    // CLI::NonNegativeNumber let NaN through (every comparison with it is
    // false), and strtod reads hexadecimal: "0x1" is no number of seconds.
    const CLI::Validator seconds(
        [](const std::string& text) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (end == text.c_str() || *end != '\0' || text.find_first_of("xX") != std::string::npos ||
                !(v >= 0 && v <= kMaxWatchSeconds))
                return "'" + text + "': SECONDS must be a number from 0 to " + std::to_string(int(kMaxWatchSeconds)) +
                       " (a day)";
            return {};
        },
        "SECONDS");
    app.add_option("-w,--watch", watch, "repeat every SECONDS until interrupted (0: once)")->check(seconds);
    app.footer(
        "Environment: SPYRE_DEV_ROOT (default /run/spyre) for PCI addresses and indices; SPYRE_LOG_LEVEL\n"
        "(error, warn, info, debug) for messages.\n"
        "Exit codes: 0 dumped (or --help), 1 the function cannot be found or read, 2 usage error.");
    try {
        app.parse(argc, argv);
        if (function->count() == 0) throw CLI::RequiredError(function->get_name());
    } catch (const CLI::ParseError& e) {
        // As the other tools: 2 for every usage error (CLI11's own codes,
        // 105 to 115 by kind, say nothing a script can rely on).
        if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
        SPYRE_LOG_ERROR("%s (see --help)", e.what());
        return 2;
    }
    try {
        FunctionInfo info = Resolve(target);
        do {
            std::string dump = spyre::driver::DumpRegisters(info);
            std::printf("# %s [%04x:%04x] %s\n%s", info.pci_address.c_str(), info.vendor_id, info.device_id,
                        info.is_vf ? "VF" : "PF", dump.c_str());
            // A dump that did not reach stdout (a full disk, stdout closed)
            // is an error: it exited 0, and --watch went on for ever.
            if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
                const int error = errno;
                SPYRE_LOG_ERROR("cannot write the dump to standard output: %s", std::strerror(error));
                return 1;
            }
            if (watch > 0) std::this_thread::sleep_for(std::chrono::duration<double>(watch));
        } while (watch > 0);
    } catch (const spyre::Error& e) {
        SPYRE_LOG_ERROR("%s", e.what());
        return 1;
    }
    return 0;
}
