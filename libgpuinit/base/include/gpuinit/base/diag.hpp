// The one way libgpuinit reports a problem: a Diagnostic says how bad it is,
// what failed (errno when an OS call did), where (file and line, device,
// group) and, in one line, the fix. Tools render these records as text or
// JSON; nothing parses rendered text back.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gpuinit {

enum class Severity { Warning, Error };

const char* severity_name(Severity severity);

// Where a problem lies. Every field is optional.
struct Location {
    std::string file;   // as shown to the admin: "/etc/gpu-restriction.conf"
    size_t line = 0;    // 1-based; 0 when the problem is not on one line
    std::string device; // "/dev/nvidia0", "GPU 0 (0000:17:00.0)", "nvidia_uvm"
    std::string group;  // the group the problem concerns

    static Location in_file(std::string file, size_t line = 0);
    static Location of_device(std::string device, std::string group = {});
};

struct Diagnostic {
    Severity severity = Severity::Error;
    int code = 0;   // errno when an OS call failed, else 0
    int reason = 0; // the producing component's own classification, 0 when none
    Location where;
    std::string message; // what failed and the fix, one line

    // "file:line: message", or the message alone when there is no file.
    std::string text() const;
};

// Builders. The message says what failed; os_error appends strerror(code).
Diagnostic error(std::string message, int code = 0);
Diagnostic os_error(int code, std::string_view what);
Diagnostic errno_error(std::string_view what);
Diagnostic parse_error(std::string_view file, size_t line, std::string message);

// The problems of one run, in the order they were found.
class Diagnostics {
  public:
    void add(Diagnostic diagnostic);
    void warning(std::string message, Location where = {});
    void error(std::string message, Location where = {}, int code = 0);

    bool has_errors() const;
    size_t count(Severity severity) const;
    bool empty() const { return items_.empty(); }
    const std::vector<Diagnostic>& items() const { return items_; }

  private:
    std::vector<Diagnostic> items_;
};

} // namespace gpuinit
