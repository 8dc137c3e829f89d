// Printing a tool's report: diagnostics as "program: error: ..." lines on
// stderr (what udev and init logs keep), results on stdout, or one JSON
// document. Every line is escaped (base/text.hpp printable()): text from
// files never reaches a terminal raw, and a NUL does not cut it.
#pragma once

#include "gpuinit/base/diag.hpp"
#include "gpuinit/base/json.hpp"

#include <string>
#include <string_view>

namespace gpuinit::tools {

// Text for the two streams; tests compare these.
struct Rendered {
    std::string out;
    std::string err;
};

// "program: error: file:line: message\n"; warnings only at verbosity >= 0.
void render_diagnostics(const char* program, const Diagnostics& diagnostics, int verbosity,
                        Rendered& rendered);

// The diagnostics as a JSON array of objects: severity, message (with its
// file and line), code, errno (name), file, line, device, group.
void write_diagnostics_json(JsonWriter& json, const Diagnostics& diagnostics);

// Writes both streams, escaping each line.
void emit(const Rendered& rendered);
// Writes a JSON document (already escaped by JsonWriter) and a newline.
void emit_json(const JsonWriter& json);

// A command that stops on one failure: prints it (as text on stderr, or as a
// JSON document with exit_code and diagnostics) and returns `code`.
int report_failure(const char* program, const Diagnostic& failure, bool json, int verbosity,
                   int code);

} // namespace gpuinit::tools
