// Tool side (see oci_runtime.hpp): uses the standard library, so it must
// never be reached from libgpulimit.so (tests/limiter/abi checks).
#include "gpuinit/limit/oci_runtime.hpp"

#include "gpuinit/base/json_value.hpp"
#include "gpuinit/base/spawn.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/sysroot.hpp"
#include "gpuinit/limit/oci_edit.hpp"

#include <cerrno>
#include <ctime>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit::limit::oci {

namespace {

constexpr const char* kRuntimeDirs[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin",
                                        "/usr/bin",        "/sbin",          "/bin"};
constexpr const char* kRuntimeNames[] = {"nvidia-container-runtime", "runc", "crun"};

// Whether `candidate` is this program's own file (a shim told to run
// itself would run itself for ever).
bool is_self(const struct stat& candidate) {
    auto root = Sysroot::open("/");
    if (!root) {
        return false;
    }
    auto self = root->open_file("proc/self/exe");
    struct stat status {};
    return self && ::fstat(self->get(), &status) == 0 && status.st_dev == candidate.st_dev &&
           status.st_ino == candidate.st_ino;
}

} // namespace

Result<std::string> find_runtime(const std::optional<std::string>& given,
                                 const std::optional<std::string>& from_environment) {
    std::optional<std::string> chosen = given;
    const char* from = "--runtime-path";
    if (!chosen && from_environment && !from_environment->empty()) {
        chosen = from_environment;
        from = "GPU_LIMIT_RUNTIME";
    }
    if (chosen) {
        if (chosen->empty() || (*chosen)[0] != '/') {
            return error(std::string(from) + "=" + quote(*chosen) + " is not an absolute path");
        }
        struct stat status {};
        if (::stat(chosen->c_str(), &status) == 0 && is_self(status)) {
            return error(std::string(from) + " names gpu-limit itself; name runc, crun or "
                                             "nvidia-container-runtime");
        }
        return *chosen;
    }
    for (const char* name : kRuntimeNames) {
        for (const char* dir : kRuntimeDirs) {
            std::string path = std::string(dir) + "/" + name;
            struct stat status {};
            if (::stat(path.c_str(), &status) == 0 && S_ISREG(status.st_mode) &&
                (status.st_mode & 0111) != 0 && !is_self(status)) {
                return path;
            }
        }
    }
    return error("no OCI runtime found (nvidia-container-runtime, runc or crun in /usr/sbin, "
                 "/usr/bin, ...); install runc or give --runtime-path PATH in daemon.json's "
                 "runtimeArgs",
                 ENOENT);
}

RuntimeLog runtime_log(const std::vector<std::string>& forward, const std::string& command) {
    RuntimeLog log;
    for (size_t i = 0; i < forward.size() && forward[i] != command; ++i) {
        const std::string& word = forward[i];
        for (const char* name : {"--log", "-log", "--log-format", "-log-format"}) {
            std::string option = name;
            std::optional<std::string> value;
            if (word == option && i + 1 < forward.size()) {
                value = forward[i + 1];
            } else if (word.rfind(option + "=", 0) == 0) {
                value = word.substr(option.size() + 1);
            }
            if (!value) {
                continue;
            }
            if (option.find("format") != std::string::npos) {
                log.json = *value == "json";
            } else {
                log.path = *value;
            }
        }
    }
    return log;
}

void log_runtime_failure(const RuntimeLog& log, const std::string& message) {
    if (log.path.empty() || log.path[0] != '/') {
        return;
    }
    UniqueFd fd(
        ::open(log.path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
    if (!fd.valid()) {
        return;
    }
    std::string line;
    if (log.json) {
        JsonValue entry = JsonValue::make_object();
        entry.member("level") = JsonValue::make_string("error");
        entry.member("msg") = JsonValue::make_string(message);
        char stamp[32];
        std::time_t now = std::time(nullptr);
        struct tm utc {};
        ::gmtime_r(&now, &utc);
        std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
        entry.member("time") = JsonValue::make_string(stamp);
        line = serialize_json(entry) + "\n";
    } else {
        line = message + "\n";
    }
    (void)write_all(fd.get(), line, log.path);
}

Diagnostic exec_runtime(const std::string& runtime, const std::vector<std::string>& forward) {
    std::vector<std::string> words = forward;
    std::vector<char*> argv;
    argv.reserve(words.size() + 2);
    argv.push_back(const_cast<char*>(runtime.c_str()));
    for (std::string& word : words) {
        argv.push_back(word.data());
    }
    argv.push_back(nullptr);
    ::execv(runtime.c_str(), argv.data());
    return errno_error("cannot run " + runtime);
}

Result<int> run_runtime(const std::string& runtime, const std::vector<std::string>& forward) {
    SpawnRequest request;
    request.argv.push_back(runtime);
    request.argv.insert(request.argv.end(), forward.begin(), forward.end());
    auto ran = run_program(request);
    if (!ran) {
        return error("cannot run " + runtime + ": " + ran.error().message, ran.error().code);
    }
    return *ran;
}

} // namespace gpuinit::limit::oci
