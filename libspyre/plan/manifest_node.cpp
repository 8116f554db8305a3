// SPDX-License-Identifier: Apache-2.0
#include "plan/manifest_node.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>

#include "plan/plan_format.hpp"
#include "spyre/error.hpp"

namespace spyre::plan_format {

using nlohmann::json;

namespace {

// Where the parser is, as a field path ("tensors[1].shape[0]"), rebuilt
// from nlohmann's parse events: an error in the middle of a value (a number
// no double holds, a string that is not UTF-8) can then name its field.
class ParsePath {
public:
    void Event(json::parse_event_t event, const json& parsed) {
        switch (event) {
        case json::parse_event_t::object_start: frames_.push_back({false, {}, 0}); break;
        case json::parse_event_t::array_start: frames_.push_back({true, {}, 0}); break;
        case json::parse_event_t::key: frames_.back().key = parsed.get_ref<const std::string&>(); break;
        case json::parse_event_t::object_end:
        case json::parse_event_t::array_end:
            frames_.pop_back();
            ElementDone();
            break;
        case json::parse_event_t::value: ElementDone(); break;
        }
    }
    // The outermost and innermost kEnds levels of a deeper path, the
    // levels between counted: a message grew 3 bytes per level of a
    // hostile manifest's nesting (9 MB for 3 million '[').
    static constexpr size_t kEnds = 8;
    std::string Text() const {
        std::string path;
        for (size_t i = 0; i < frames_.size(); ++i) {
            if (frames_.size() > 2 * kEnds && i == kEnds) {
                path += "...(" + std::to_string(frames_.size() - 2 * kEnds) + " levels)...";
                i = frames_.size() - kEnds;
            }
            const Frame& f = frames_[i];
            if (f.array)
                path += "[" + std::to_string(f.index) + "]";
            else if (!f.key.empty())
                path += (path.empty() ? "" : ".") + f.key;
        }
        return path;
    }
    // Inside "operations"[i]: i, for the error's context (as the reader gives it).
    std::optional<uint64_t> OperationIndex() const {
        if (frames_.size() >= 2 && !frames_[0].array && frames_[0].key == "operations" && frames_[1].array)
            return frames_[1].index;
        return std::nullopt;
    }

private:
    struct Frame {
        bool array;
        std::string key;  // objects: the key being read
        size_t index;     // arrays: elements done
    };
    void ElementDone() {
        if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
    }
    std::vector<Frame> frames_;
};

}  // namespace

nlohmann::json ParseManifest(const std::string& text, const std::string& file) {
    ParsePath path;
    auto fail = [&](const std::string& what) {
        const std::string p = path.Text();
        return Error(ErrorKind::InvalidArgument, file + ": " + (p.empty() ? "" : p + ": ") + what,
                     ErrorContext{.op_index = path.OperationIndex()});
    };
    // One key set per open object: nlohmann keeps the last of two equal keys,
    // which would let a stray duplicate override a field unnoticed.
    std::vector<std::set<std::string>> open_objects;
    auto watch = [&](int, json::parse_event_t event, json& parsed) {
        path.Event(event, parsed);
        if (event == json::parse_event_t::object_start) {
            open_objects.emplace_back();
        } else if (event == json::parse_event_t::object_end) {
            open_objects.pop_back();
        } else if (event == json::parse_event_t::key) {
            const auto& key = parsed.get_ref<const std::string&>();
            if (!open_objects.back().insert(key).second)
                throw fail("duplicate key \"" + key + "\"");
        }
        return true;
    };
    // The parser ends the text at a NUL byte: whatever followed it (garbage
    // too) was accepted unread.
    if (const size_t nul = text.find('\0'); nul != std::string::npos)
        throw fail("not valid JSON at byte " + std::to_string(nul + 1) + ": a NUL byte (the manifest is text)");
    try {
        return json::parse(text, watch);
    } catch (const json::parse_error& e) {  // syntax, truncation, invalid UTF-8
        throw fail("not valid JSON at byte " + std::to_string(e.byte) + ": " + plan_format::JsonMessage(e.what()));
    } catch (const json::exception& e) {  // out_of_range: a number no double can hold (1e999)
        throw fail("not a usable JSON value: " + plan_format::JsonMessage(e.what()));
    }
}

void Node::Fail(const std::string& what) const {
    throw Error(ErrorKind::InvalidArgument, *file_ + ": " + (path_.empty() ? "" : path_ + ": ") + what);
}

void Node::Expect(bool ok, const char* expected) const {
    if (!ok) Fail(std::string("must be ") + expected + ", not " + value_->type_name());
}

Node Node::Field(std::string_view key) const {
    std::optional<Node> field = OptionalField(key);
    const std::string name(key);
    if (!field) Fail("missing field \"" + name + "\"");
    return *field;
}

std::optional<Node> Node::OptionalField(std::string_view key) const {
    Expect(value_->is_object(), "an object");
    const auto it = value_->find(key);
    if (it == value_->end() || it->is_null()) return std::nullopt;
    return Node(*it, file_, path_.empty() ? std::string(key) : path_ + "." + std::string(key));
}

void Node::AllowOnly(std::initializer_list<std::string_view> keys) const {
    Expect(value_->is_object(), "an object");
    for (const auto& [key, value] : value_->items())
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) Fail("unknown field \"" + key + "\"");
}

std::vector<Node> Node::Elements() const {
    Expect(value_->is_array(), "an array");
    std::vector<Node> elements;
    elements.reserve(value_->size());
    for (size_t i = 0; i < value_->size(); ++i)
        elements.push_back(Node((*value_)[i], file_, path_ + "[" + std::to_string(i) + "]"));
    return elements;
}

std::string Node::String() const {
    Expect(value_->is_string(), "a string");
    return value_->get<std::string>();
}

std::string Node::NonEmptyString() const {
    std::string s = String();
    if (s.empty()) Fail("must not be empty");
    return s;
}

void Node::ExpectInteger(const std::string& min, const std::string& max) const {
    // nlohmann stores non-negative integers as unsigned, negative ones as
    // signed, and anything with a fraction, an exponent or beyond 64 bits as
    // float. A whole float beyond 64 bits is an integer out of range (the
    // parser keeps no text to tell 18446744073709551616 from 1.8e19): said
    // so, not "not an integer". (Between 2^63 and 2^64 a whole number is an
    // unsigned integer, unless written with an exponent; -2^63 a signed one.)
    if (value_->is_number_float()) {
        const double v = value_->get<double>();
        if (std::isfinite(v) && (v >= 0x1p64 || v <= -0x1p63)) {
            char got[32];
            std::snprintf(got, sizeof got, "%.17g", v);
            Fail("out of range: must be an integer " + (v > 0 ? "<= " + max : ">= " + min) + ", got " + got);
        }
    }
    Expect(value_->is_number_integer(), "an integer");
}

int64_t Node::Int(int64_t min, int64_t max) const {
    ExpectInteger(std::to_string(min), std::to_string(max));
    if (value_->is_number_unsigned()) {
        const uint64_t v = value_->get<uint64_t>();
        if (max < 0 || v > uint64_t(max)) Fail("must be <= " + std::to_string(max) + ", got " + std::to_string(v));
        if (int64_t(v) < min) Fail("must be >= " + std::to_string(min) + ", got " + std::to_string(v));
        return int64_t(v);
    }
    const int64_t v = value_->get<int64_t>();
    if (v < min) Fail("must be >= " + std::to_string(min) + ", got " + std::to_string(v));
    if (v > max) Fail("must be <= " + std::to_string(max) + ", got " + std::to_string(v));
    return v;
}

uint64_t Node::Uint() const {
    ExpectInteger("0", std::to_string(UINT64_MAX));
    if (!value_->is_number_unsigned()) Fail("must be >= 0, got " + std::to_string(value_->get<int64_t>()));
    return value_->get<uint64_t>();
}

}  // namespace spyre::plan_format
