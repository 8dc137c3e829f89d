// How a daemon tells its service manager where it stands, and what it
// says: systemd's notify datagrams (sd_notify's protocol, written here
// without libsystemd), and the log to stderr (the journal's stream, with
// sd-daemon level prefixes) or syslog.
#pragma once

#include "gpuinit/base/diag.hpp"
#include "gpuinit/base/result.hpp"
#include "gpuinit/base/unique_fd.hpp"

#include <string>
#include <string_view>

namespace gpuinit {

// $NOTIFY_SOCKET: a path, or "@name" for the abstract namespace. Connected
// once at start, while the daemon may still open it, and used after it
// dropped root.
class Notifier {
  public:
    // No NOTIFY_SOCKET (not under systemd, or not Type=notify): inactive.
    static Result<Notifier> from_environment();
    bool active() const { return fd_.valid(); }
    // "READY=1", "STATUS=...", "STOPPING=1"; newline-separated lines.
    Status send(std::string_view state) const;

  private:
    UniqueFd fd_;
};

enum class LogLevel { Error, Warning, Info, Debug };

class Log {
  public:
    // `ident`: syslog's ident and the stderr prefix ("gpu-persist").
    // `verbosity`: -1 errors only, 0 normal, 1 debug too.
    Log(std::string_view ident, bool use_syslog, int verbosity);
    // syslog keeps a pointer to the ident: a Log stays where it was made.
    Log(const Log&) = delete;
    Log& operator=(const Log&) = delete;
    void write(LogLevel level, std::string_view message) const;
    void error(std::string_view message) const { write(LogLevel::Error, message); }
    void warning(std::string_view message) const { write(LogLevel::Warning, message); }
    void info(std::string_view message) const { write(LogLevel::Info, message); }
    void debug(std::string_view message) const { write(LogLevel::Debug, message); }
    void diagnostic(const Diagnostic& diagnostic) const;
    // With syslog: also to stderr (a --daemon that has not started yet
    // still has its caller's terminal).
    void set_also_stderr(bool also) { also_stderr_ = also; }

  private:
    std::string ident_; // openlog keeps the pointer: it lives as long as the Log
    bool syslog_;
    bool journal_; // stderr goes to the journal: prefix lines with their level
    bool also_stderr_ = false;
    int verbosity_;
};

} // namespace gpuinit
