#include "render/status_report.hpp"

#include "gpuinit/base/json.hpp"
#include "gpuinit/base/text.hpp"

#include <cmath>
#include <cstdio>

namespace gpuinit::tools {

namespace {

constexpr const char* kProgram = "gpuinit status";

// The shortest text that reads back as the same double.
std::string sample_value(double value) {
    if (std::isnan(value)) {
        return "NaN";
    }
    if (std::isinf(value)) {
        return value > 0 ? "+Inf" : "-Inf";
    }
    char buffer[40];
    for (int precision = 15; precision <= 17; ++precision) {
        std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
        if (std::strtod(buffer, nullptr) == value) {
            break;
        }
    }
    return buffer;
}

// A label value: valid UTF-8 without control characters (printable), then
// the format's three escapes.
std::string label_value(std::string_view raw) {
    std::string out;
    for (char c : printable(raw)) {
        if (c == '\\' || c == '"') {
            out += '\\';
        }
        out += c;
    }
    return out;
}

std::string first_line_reason(const status::Report& report) {
    auto first = report.first_problem();
    if (!first) {
        return {};
    }
    const status::Section& section = report.sections[*first];
    return section.probe + ": " + section.reason;
}

} // namespace

Rendered render_status_text(const status::Report& report, int exit_code, int verbosity) {
    Rendered rendered;
    if (verbosity >= 0) {
        for (const status::Section& section : report.sections) {
            std::string reason = section.reason;
            if (reason.empty() && !section.items.empty()) {
                reason = section.items.front().detail.empty()
                             ? section.items.front().what + " " + section.items.front().state
                             : section.items.front().detail;
            }
            rendered.out += format("%-8s %-14s %s\n", section.probe.c_str(),
                                   status::verdict_name(section.verdict), reason.c_str());
            for (const status::Item& item : section.items) {
                if (!item.problem && verbosity < 1) {
                    continue;
                }
                rendered.out += format("  %-24s %-10s %s\n", item.what.c_str(), item.state.c_str(),
                                       item.detail.c_str());
            }
        }
    }
    if (exit_code != 0 && report.first_problem()) {
        rendered.err += std::string(kProgram) + ": " + first_line_reason(report) + "\n";
    }
    return rendered;
}

std::string render_status_json(const status::Report& report, int exit_code) {
    JsonWriter json;
    json.begin_object();
    json.key("exit_code").value(exit_code);
    json.key("reason").value(first_line_reason(report));
    json.key("timestamp").value(static_cast<uint64_t>(report.timestamp));
    json.key("probes").begin_array();
    for (const status::Section& section : report.sections) {
        json.begin_object();
        json.key("probe").value(section.probe);
        json.key("verdict").value(status::verdict_name(section.verdict));
        json.key("success").value(status::probe_succeeded(section.verdict));
        json.key("configured").value(section.verdict != status::Verdict::NotConfigured);
        json.key("ok").value(!status::is_problem(section.verdict));
        json.key("reason").value(section.reason);
        json.key("milliseconds").value(static_cast<uint64_t>(std::llround(section.seconds * 1000)));
        json.key("items").begin_array();
        for (const status::Item& item : section.items) {
            json.begin_object();
            json.key("what").value(item.what);
            json.key("state").value(item.state);
            json.key("detail").value(item.detail);
            json.key("problem").value(item.problem);
            json.end_object();
        }
        json.end_array();
        json.end_object();
    }
    json.end_array();
    json.end_object();
    return json.str() + "\n";
}

std::string render_status_prometheus(const status::Report& report, int exit_code) {
    std::vector<status::Metric> samples = status::report_metrics(report, exit_code);
    std::string out;
    for (const status::MetricFamily& family : status::kMetricFamilies) {
        bool any = false;
        for (const status::Metric& sample : samples) {
            if (sample.name != family.name) {
                continue;
            }
            if (!any) {
                out += format("# HELP %s %s\n# TYPE %s %s\n", family.name, family.help, family.name,
                              family.type);
                any = true;
            }
            out += sample.name;
            if (!sample.labels.empty()) {
                out += '{';
                for (size_t i = 0; i < sample.labels.size(); ++i) {
                    out += (i > 0 ? "," : "") + sample.labels[i].first + "=\"" +
                           label_value(sample.labels[i].second) + "\"";
                }
                out += '}';
            }
            out += " " + sample_value(sample.value) + "\n";
        }
    }
    return out;
}

} // namespace gpuinit::tools
