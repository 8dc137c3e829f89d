// A section as the probing child hands it to its parent through a pipe: one
// record a line, tab-separated fields, backslash escapes for tab, newline
// and backslash. Only this parent and its own child speak it; the parent
// still refuses what does not parse instead of taking part of it.
#include "gpuinit/base/text.hpp"
#include "gpuinit/status/report.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace gpuinit::status {

namespace {

const Verdict kVerdicts[] = {Verdict::Ok,      Verdict::NotConfigured, Verdict::Differs,
                             Verdict::Partial, Verdict::Failed,        Verdict::NotPermitted,
                             Verdict::TimedOut};

void put(std::string& out, std::string_view field) {
    out += '\t';
    for (char c : field) {
        switch (c) {
        case '\\':
            out += "\\\\";
            break;
        case '\t':
            out += "\\t";
            break;
        case '\n':
            out += "\\n";
            break;
        default:
            out += c;
        }
    }
}

std::string number(double value) {
    char buffer[40];
    std::snprintf(buffer, sizeof(buffer), "%.17g", value);
    return buffer;
}

// The line's fields, unescaped; nullopt on a bad escape.
std::optional<std::vector<std::string>> fields_of(std::string_view line) {
    std::vector<std::string> fields(1);
    for (size_t i = 0; i < line.size(); ++i) {
        char c = line[i];
        if (c == '\t') {
            fields.emplace_back();
        } else if (c == '\\') {
            if (++i == line.size()) {
                return std::nullopt;
            }
            char next = line[i];
            fields.back() += next == 't' ? '\t' : next == 'n' ? '\n' : next == '\\' ? '\\' : '\0';
            if (next != 't' && next != 'n' && next != '\\') {
                return std::nullopt;
            }
        } else {
            fields.back() += c;
        }
    }
    return fields;
}

std::optional<double> parse_number(const std::string& text) {
    if (text.empty()) {
        return std::nullopt;
    }
    char* end = nullptr;
    errno = 0;
    double value = std::strtod(text.c_str(), &end);
    if (errno != 0 || end != text.c_str() + text.size()) {
        return std::nullopt;
    }
    return value;
}

} // namespace

std::string encode_section(const Section& section) {
    std::string out = "S";
    put(out, section.probe);
    put(out, verdict_name(section.verdict));
    put(out, section.reason);
    put(out, number(section.seconds));
    out += '\n';
    for (const Item& item : section.items) {
        out += "I";
        put(out, item.what);
        put(out, item.state);
        put(out, item.detail);
        put(out, item.problem ? "1" : "0");
        out += '\n';
    }
    for (const Metric& sample : section.metrics) {
        out += "M";
        put(out, sample.name);
        put(out, number(sample.value));
        for (const auto& [key, value] : sample.labels) {
            put(out, key);
            put(out, value);
        }
        out += '\n';
    }
    out += "E\n";
    return out;
}

Result<Section> decode_section(std::string_view text) {
    Section section;
    bool started = false;
    size_t line_number = 0;
    while (!text.empty()) {
        size_t newline = text.find('\n');
        if (newline == std::string_view::npos) {
            return error("the probe's record was cut off", EPROTO);
        }
        std::string_view line = text.substr(0, newline);
        text.remove_prefix(newline + 1);
        ++line_number;
        auto fields = fields_of(line);
        auto bad = [&] {
            return error(format("the probe's record is malformed at line %zu", line_number),
                         EPROTO);
        };
        if (!fields) {
            return bad();
        }
        const std::vector<std::string>& f = *fields;
        if (f[0] == "S" && !started && f.size() == 5) {
            section.probe = f[1];
            bool known = false;
            for (Verdict verdict : kVerdicts) {
                if (f[2] == verdict_name(verdict)) {
                    section.verdict = verdict;
                    known = true;
                }
            }
            auto seconds = parse_number(f[4]);
            if (!known || !seconds) {
                return bad();
            }
            section.reason = f[3];
            section.seconds = *seconds;
            started = true;
        } else if (f[0] == "I" && started && f.size() == 5 && (f[4] == "0" || f[4] == "1")) {
            section.items.push_back({f[1], f[2], f[3], f[4] == "1"});
        } else if (f[0] == "M" && started && f.size() >= 3 && f.size() % 2 == 1) {
            auto value = parse_number(f[2]);
            if (!value) {
                return bad();
            }
            Metric sample{f[1], {}, *value};
            for (size_t i = 3; i + 1 < f.size(); i += 2) {
                sample.labels.emplace_back(f[i], f[i + 1]);
            }
            section.metrics.push_back(std::move(sample));
        } else if (f[0] == "E" && started && f.size() == 1 && text.empty()) {
            return section;
        } else {
            return bad();
        }
    }
    return error("the probe ended without a record", EPROTO);
}

} // namespace gpuinit::status
