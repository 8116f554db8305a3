// SPDX-License-Identifier: Apache-2.0
// What a task threw that is not a std::exception, in words for its failure
// record: a thrown string or number says what it was, instead of only that
// it was something else.
#pragma once

#include <string>

namespace spyre::detail {

// Call inside a catch (...) block (it rethrows what is in flight).
inline std::string DescribeThrownValue() {
    constexpr const char* kWhat = "an exception that is not a std::exception";
    try {
        throw;
    } catch (const char* s) {
        return std::string(kWhat) + (s ? ": the string \"" + std::string(s) + "\"" : ": a null string");
    } catch (const std::string& s) {
        return std::string(kWhat) + ": the std::string \"" + s + "\"";
    } catch (int v) {
        return std::string(kWhat) + ": the int " + std::to_string(v);
    } catch (long v) {
        return std::string(kWhat) + ": the long " + std::to_string(v);
    } catch (unsigned v) {
        return std::string(kWhat) + ": the unsigned " + std::to_string(v);
    } catch (...) {
        return kWhat;
    }
}

}  // namespace spyre::detail
