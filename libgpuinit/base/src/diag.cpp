#include "gpuinit/base/diag.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gpuinit {

const char* severity_name(Severity severity) {
    return severity == Severity::Error ? "error" : "warning";
}

Location Location::in_file(std::string file, size_t line) {
    Location where;
    where.file = std::move(file);
    where.line = line;
    return where;
}

Location Location::of_device(std::string device, std::string group) {
    Location where;
    where.device = std::move(device);
    where.group = std::move(group);
    return where;
}

std::string Diagnostic::text() const {
    if (where.file.empty()) {
        return message;
    }
    std::string out = where.file;
    if (where.line != 0) {
        out += ':';
        out += std::to_string(where.line);
    }
    out += ": ";
    out += message;
    return out;
}

Diagnostic error(std::string message, int code) {
    Diagnostic diagnostic;
    diagnostic.code = code;
    diagnostic.message = std::move(message);
    return diagnostic;
}

Diagnostic os_error(int code, std::string_view what) {
    std::string message(what);
    message += ": ";
    message += std::strerror(code);
    return error(std::move(message), code);
}

Diagnostic errno_error(std::string_view what) {
    return os_error(errno, what);
}

Diagnostic parse_error(std::string_view file, size_t line, std::string message) {
    Diagnostic diagnostic = error(std::move(message), EINVAL);
    diagnostic.where.file = file;
    diagnostic.where.line = line;
    return diagnostic;
}

void Diagnostics::add(Diagnostic diagnostic) {
    items_.push_back(std::move(diagnostic));
}

void Diagnostics::warning(std::string message, Location where) {
    Diagnostic diagnostic;
    diagnostic.severity = Severity::Warning;
    diagnostic.where = std::move(where);
    diagnostic.message = std::move(message);
    add(std::move(diagnostic));
}

void Diagnostics::error(std::string message, Location where, int code) {
    Diagnostic diagnostic = gpuinit::error(std::move(message), code);
    diagnostic.where = std::move(where);
    add(std::move(diagnostic));
}

bool Diagnostics::has_errors() const {
    return count(Severity::Error) > 0;
}

size_t Diagnostics::count(Severity severity) const {
    return static_cast<size_t>(std::count_if(
        items_.begin(), items_.end(), [&](const Diagnostic& d) { return d.severity == severity; }));
}

} // namespace gpuinit
