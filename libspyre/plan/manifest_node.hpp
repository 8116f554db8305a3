// SPDX-License-Identifier: Apache-2.0
// Internal: typed, path-aware access to a parsed plan.json. Every accessor
// checks the JSON type and range first and throws Error(InvalidArgument)
// "<file>: <field path>: <what>", so no nlohmann exception and no unchecked
// value gets past it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace spyre::plan_format {

// Parses manifest text. Syntax errors and invalid UTF-8 (with nlohmann's byte
// position), numbers no double can hold (1e999) and duplicate object keys
// (which nlohmann would silently collapse) throw Error(InvalidArgument)
// naming `file` and the field the parser was in; no nlohmann exception
// gets out.
nlohmann::json ParseManifest(const std::string& text, const std::string& file);

class Node {
public:
    // The root of a manifest; `file` must outlive every Node derived from it.
    Node(const nlohmann::json& value, const std::string& file) : value_(&value), file_(&file) {}

    const std::string& path() const noexcept { return path_; }
    const std::string& file() const noexcept { return *file_; }
    [[noreturn]] void Fail(const std::string& what) const;

    // Object access. Field: the key must be present. OptionalField: absent
    // or null gives nullopt. AllowOnly rejects every other key (so a typo
    // cannot silently drop a constraint).
    Node Field(std::string_view key) const;
    std::optional<Node> OptionalField(std::string_view key) const;
    void AllowOnly(std::initializer_list<std::string_view> keys) const;

    std::vector<Node> Elements() const;  // the value must be an array
    std::string String() const;          // any string
    std::string NonEmptyString() const;
    int64_t Int(int64_t min, int64_t max) const;
    uint64_t Uint() const;               // 0 .. 2^64-1

private:
    Node(const nlohmann::json& value, const std::string* file, std::string path)
        : value_(&value), file_(file), path_(std::move(path)) {}
    void Expect(bool ok, const char* expected) const;
    // An integer; a number beyond 64 bits is out of range, naming `min` or `max`.
    void ExpectInteger(const std::string& min, const std::string& max) const;

    const nlohmann::json* value_;
    const std::string* file_;
    std::string path_;
};

}  // namespace spyre::plan_format
