#include "proc_trace.hpp"

#include "switch.hpp"

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace gpulimit {
namespace {

void say(const char* line) {
    (void)!write(STDERR_FILENO, line, std::strlen(line));
}

// A trace file named by an environment variable, opened on first use and
// cached in `cache` (kTraceUnread until then, kTraceOff when there is none).
int open_trace(std::atomic<int>& cache, const char* variable) {
    const char* value = secure_execution() ? nullptr : secure_getenv(variable);
    int fd = kTraceOff;
    if (value == nullptr || value[0] == '\0') {
        fd = kTraceOff;
    } else if (std::strcmp(value, "stderr") == 0) {
        fd = STDERR_FILENO;
    } else if (value[0] != '/') {
        char line[256];
        std::snprintf(line, sizeof(line),
                      "gpulimit: %s is neither an absolute path nor \"stderr\"; no trace is "
                      "written; set it to a path such as /tmp/gpulimit-trace.log\n",
                      variable);
        say(line);
    } else {
        fd = open(value, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
        if (fd < 0) {
            char line[512];
            std::snprintf(line, sizeof(line),
                          "gpulimit: cannot open %s=%.300s: %s; no trace is written; name a "
                          "file this process may create\n",
                          variable, value, std::strerror(errno));
            say(line);
            fd = kTraceOff;
        }
    }
    int expected = kTraceUnread;
    if (!cache.compare_exchange_strong(expected, fd, std::memory_order_acq_rel)) {
        if (fd > STDERR_FILENO) {
            close(fd); // another thread opened it first
        }
        return expected;
    }
    return fd;
}

constinit std::atomic<int> g_fd{kTraceUnread};

int trace_fd() {
    return trace_file(g_fd, kProcTraceVariable);
}

// The requests seen, as 64-bit hashes (0 is never stored): a set that only
// grows, lock-free. Full, every request is written (duplicates, not loss).
constexpr unsigned kSeen = 2048;
constinit std::atomic<uint64_t> g_seen[kSeen] = {};

uint64_t request_hash(const char* symbol, int cudaVersion, cuuint64_t flags) {
    uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a
    const auto mix = [&h](unsigned char byte) {
        h ^= byte;
        h *= 0x100000001b3ULL;
    };
    for (const char* c = symbol; *c != '\0'; ++c) {
        mix(static_cast<unsigned char>(*c));
    }
    mix(0);
    for (int i = 0; i < 4; ++i) {
        mix(static_cast<unsigned char>(static_cast<unsigned>(cudaVersion) >> (8 * i)));
    }
    for (int i = 0; i < 8; ++i) {
        mix(static_cast<unsigned char>(flags >> (8 * i)));
    }
    return h != 0 ? h : 1;
}

// True the first time this request is seen.
bool first_time(uint64_t hash) {
    for (unsigned probe = 0; probe < kSeen; ++probe) {
        std::atomic<uint64_t>& slot = g_seen[(hash + probe) % kSeen];
        uint64_t current = slot.load(std::memory_order_acquire);
        if (current == hash) {
            return false;
        }
        if (current == 0) {
            if (slot.compare_exchange_strong(current, hash, std::memory_order_acq_rel)) {
                return true;
            }
            if (current == hash) {
                return false;
            }
        }
    }
    return true;
}

} // namespace

int trace_file(std::atomic<int>& cache, const char* variable) {
    const int fd = cache.load(std::memory_order_acquire);
    return fd != kTraceUnread ? fd : open_trace(cache, variable);
}

void write_trace_line(int fd, char* line, int length, size_t size) {
    if (fd < 0 || length < 0) {
        return;
    }
    if (static_cast<size_t>(length) > size - 2) {
        length = static_cast<int>(size - 2);
    }
    line[length++] = '\n';
    // One write per line: with O_APPEND, lines of several processes do not mix.
    (void)!write(fd, line, static_cast<size_t>(length));
}

bool proc_trace_enabled() {
    return trace_fd() >= 0;
}

void proc_trace(const char* api, const char* symbol, int cudaVersion, cuuint64_t flags,
                const char* outcome, ...) {
    const int fd = trace_fd();
    const char* name = symbol != nullptr ? symbol : "(null)";
    if (fd < 0 || !first_time(request_hash(name, cudaVersion, flags))) {
        return;
    }
    char what[384];
    va_list args;
    va_start(args, outcome);
    const int what_length = std::vsnprintf(what, sizeof(what), outcome, args);
    va_end(args);
    char line[512];
    const int length =
        std::snprintf(line, sizeof(line) - 1, "gpulimit: pid %d %s(%.128s, %d, %llu): %s",
                      static_cast<int>(getpid()), api, name, cudaVersion,
                      static_cast<unsigned long long>(flags), what_length >= 0 ? what : "?");
    write_trace_line(fd, line, length, sizeof(line));
}

} // namespace gpulimit
