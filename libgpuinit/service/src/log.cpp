#include "gpuinit/service/log.hpp"

#include "gpuinit/base/text.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>

namespace gpuinit {

Result<Notifier> Notifier::from_environment() {
    Notifier notifier;
    const char* path = std::getenv("NOTIFY_SOCKET");
    if (path == nullptr || *path == '\0') {
        return notifier;
    }
    size_t length = std::strlen(path);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if ((path[0] != '/' && path[0] != '@') || length >= sizeof(address.sun_path)) {
        return error("NOTIFY_SOCKET=" + quote(path) +
                         " is not a socket path; unset it or run "
                         "the daemon from a Type=notify unit",
                     EINVAL);
    }
    std::memcpy(address.sun_path, path, length);
    if (path[0] == '@') {
        address.sun_path[0] = '\0';
    }
    UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
        return errno_error("socket for NOTIFY_SOCKET");
    }
    auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), size) != 0) {
        return errno_error("cannot connect to NOTIFY_SOCKET " + quote(path));
    }
    notifier.fd_ = std::move(fd);
    return notifier;
}

Status Notifier::send(std::string_view state) const {
    if (!active()) {
        return {};
    }
    if (::send(fd_.get(), state.data(), state.size(), MSG_NOSIGNAL) < 0) {
        return errno_error("notify the service manager");
    }
    return {};
}

Log::Log(std::string_view ident, bool use_syslog, int verbosity)
    : ident_(ident), syslog_(use_syslog), journal_(std::getenv("JOURNAL_STREAM") != nullptr),
      verbosity_(verbosity) {
    if (syslog_) {
        ::openlog(ident_.c_str(), LOG_PID | LOG_NDELAY, LOG_DAEMON);
    }
}

void Log::write(LogLevel level, std::string_view message) const {
    if ((level == LogLevel::Info && verbosity_ < 0) ||
        (level == LogLevel::Debug && verbosity_ < 1)) {
        return;
    }
    std::string line = printable(message);
    if (syslog_) {
        int priority = level == LogLevel::Error     ? LOG_ERR
                       : level == LogLevel::Warning ? LOG_WARNING
                       : level == LogLevel::Info    ? LOG_INFO
                                                    : LOG_DEBUG;
        ::syslog(priority, "%s", line.c_str());
        if (!also_stderr_ || level == LogLevel::Info || level == LogLevel::Debug) {
            return;
        }
    }
    // sd-daemon's prefixes: the journal takes the level from them.
    const char* prefix = level == LogLevel::Error     ? "<3>"
                         : level == LogLevel::Warning ? "<4>"
                         : level == LogLevel::Info    ? "<6>"
                                                      : "<7>";
    std::fprintf(stderr, "%s%s: %s\n", journal_ ? prefix : "", ident_.c_str(), line.c_str());
}

void Log::diagnostic(const Diagnostic& diagnostic) const {
    write(diagnostic.severity == Severity::Error ? LogLevel::Error : LogLevel::Warning,
          diagnostic.text());
}

} // namespace gpuinit
