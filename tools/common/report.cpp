#include "report.hpp"

#include "gpuinit/base/text.hpp"

#include <cstdio>
#include <cstring>

namespace gpuinit::tools {

namespace {

void write_escaped(FILE* stream, std::string_view text) {
    std::string line;
    while (!text.empty()) {
        size_t end = text.find('\n');
        std::string_view part = text.substr(0, end);
        line = printable(part);
        if (end != std::string_view::npos) {
            line += '\n';
        }
        std::fwrite(line.data(), 1, line.size(), stream);
        text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    }
}

} // namespace

void render_diagnostics(const char* program, const Diagnostics& diagnostics, int verbosity,
                        Rendered& rendered) {
    for (const Diagnostic& diagnostic : diagnostics.items()) {
        if (diagnostic.severity == Severity::Warning && verbosity < 0) {
            continue;
        }
        rendered.err += std::string(program) + ": " + severity_name(diagnostic.severity) + ": " +
                        printable(diagnostic.text()) + "\n";
    }
}

void write_diagnostics_json(JsonWriter& json, const Diagnostics& diagnostics) {
    json.begin_array();
    for (const Diagnostic& diagnostic : diagnostics.items()) {
        json.begin_object();
        json.key("severity").value(severity_name(diagnostic.severity));
        json.key("message").value(diagnostic.text());
        json.key("code").value(diagnostic.code);
        if (diagnostic.code != 0) {
            const char* name = strerrorname_np(diagnostic.code);
            json.key("errno").value(name != nullptr ? name : "");
        }
        if (!diagnostic.where.file.empty()) {
            json.key("file").value(diagnostic.where.file);
            json.key("line").value(static_cast<uint64_t>(diagnostic.where.line));
        }
        if (!diagnostic.where.device.empty()) {
            json.key("device").value(diagnostic.where.device);
        }
        if (!diagnostic.where.group.empty()) {
            json.key("group").value(diagnostic.where.group);
        }
        json.end_object();
    }
    json.end_array();
}

void emit_json(const JsonWriter& json) {
    std::string text = json.str() + "\n";
    std::fwrite(text.data(), 1, text.size(), stdout);
}

void emit(const Rendered& rendered) {
    write_escaped(stdout, rendered.out);
    write_escaped(stderr, rendered.err);
}

int report_failure(const char* program, const Diagnostic& failure, bool json, int verbosity,
                   int code) {
    Diagnostics diagnostics;
    diagnostics.add(failure);
    if (json) {
        JsonWriter writer;
        writer.begin_object();
        writer.key("exit_code").value(code);
        writer.key("diagnostics");
        write_diagnostics_json(writer, diagnostics);
        writer.end_object();
        emit_json(writer);
        return code;
    }
    Rendered rendered;
    render_diagnostics(program, diagnostics, verbosity, rendered);
    emit(rendered);
    return code;
}

} // namespace gpuinit::tools
