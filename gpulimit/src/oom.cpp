#include "oom.hpp"

#include "runtime.hpp"
#include "switch.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpulimit {
namespace {

constexpr const char* kOurVariables[] = {
    "GPU_LIMIT_OOM_PID=", "GPU_LIMIT_OOM_DEVICE=", "GPU_LIMIT_OOM_REQUEST=", "GPU_LIMIT_OOM_USAGE=",
    "GPU_LIMIT_OOM_CAP="};
constexpr size_t kOurCount = sizeof(kOurVariables) / sizeof(kOurVariables[0]);

bool is_ours(const char* entry) {
    for (const char* prefix : kOurVariables) {
        if (strncmp(entry, prefix, strlen(prefix)) == 0) {
            return true;
        }
    }
    return false;
}

// The envp array lives in anonymous memory (no heap in the library) and is
// unmapped when the script has been started.
class EnvArray {
  public:
    explicit EnvArray(size_t entries) : bytes_(entries * sizeof(char*)) {
        void* memory =
            mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        data_ = memory == MAP_FAILED ? nullptr : static_cast<char**>(memory);
    }
    ~EnvArray() {
        if (data_ != nullptr) {
            munmap(data_, bytes_);
        }
    }
    EnvArray(const EnvArray&) = delete;
    EnvArray& operator=(const EnvArray&) = delete;
    char** get() const { return data_; }

  private:
    size_t bytes_;
    char** data_;
};

uint64_t monotonic_ms() {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<uint64_t>(now.tv_sec) * 1000 + static_cast<uint64_t>(now.tv_nsec) / 1000000;
}

void say(const char* line) {
    const size_t length = strlen(line);
    // One write, so that the line is not interleaved with another thread's.
    (void)!write(STDERR_FILENO, line, length);
}

// True once the child is gone: reaped by us, by SIGCHLD=SIG_IGN or by a
// program that reaps all its children.
bool child_gone(pid_t pid, int flags) {
    for (;;) {
        const pid_t result = waitpid(pid, nullptr, flags);
        if (result == pid) {
            return true;
        }
        if (result == 0) {
            return false;
        }
        if (errno == EINTR) {
            continue;
        }
        return true; // ECHILD
    }
}

} // namespace

void run_oom_script(const char* script, uint32_t timeout_ms, const char* device_uuid,
                    uint64_t request, uint64_t usage, uint64_t cap) {
    // Never in a secure-execution process, whatever reached here: the
    // script's name came from the environment of the caller.
    if (secure_execution()) {
        return;
    }
    char values[kOurCount][96];
    snprintf(values[0], sizeof(values[0]), "GPU_LIMIT_OOM_PID=%d", static_cast<int>(getpid()));
    snprintf(values[1], sizeof(values[1]), "GPU_LIMIT_OOM_DEVICE=%s", device_uuid);
    snprintf(values[2], sizeof(values[2]), "GPU_LIMIT_OOM_REQUEST=%llu",
             static_cast<unsigned long long>(request));
    snprintf(values[3], sizeof(values[3]), "GPU_LIMIT_OOM_USAGE=%llu",
             static_cast<unsigned long long>(usage));
    snprintf(values[4], sizeof(values[4]), "GPU_LIMIT_OOM_CAP=%llu",
             static_cast<unsigned long long>(cap));

    size_t inherited = 0;
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
        ++inherited;
    }
    EnvArray envp(inherited + kOurCount + 1);
    if (envp.get() == nullptr) {
        return;
    }
    size_t n = 0;
    for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
        if (!is_ours(*entry)) {
            envp.get()[n++] = *entry;
        }
    }
    for (auto& value : values) {
        envp.get()[n++] = value;
    }
    envp.get()[n] = nullptr;

    // Its own process group, so that a timeout also ends what it started;
    // default signal mask, since the caller's may block anything.
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setpgroup(&attributes, 0);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
    char* argv[] = {const_cast<char*>(script), nullptr};
    pid_t pid = -1;
    const int spawned = posix_spawn(&pid, script, nullptr, &attributes, argv, envp.get());
    posix_spawnattr_destroy(&attributes);
    if (spawned != 0) {
        char line[512];
        snprintf(line, sizeof(line), "gpulimit: cannot run ALIYUN_COM_GPU_OOM_SCRIPT %s: %s\n",
                 script, strerror(spawned));
        say(line);
        return;
    }

    const uint64_t deadline = monotonic_ms() + timeout_ms;
    while (!child_gone(pid, WNOHANG)) {
        if (monotonic_ms() >= deadline) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            child_gone(pid, 0);
            char line[512];
            snprintf(line, sizeof(line),
                     "gpulimit: ALIYUN_COM_GPU_OOM_SCRIPT %s ran longer than %u ms and was "
                     "killed; raise GPU_LIMIT_OOM_SCRIPT_TIMEOUT if it needs longer\n",
                     script, timeout_ms);
            say(line);
            return;
        }
        const timespec interval{0, 2L * 1000 * 1000};
        nanosleep(&interval, nullptr);
    }
}

void handle_refusal(Runtime& runtime, const DeviceInfo& device, uint64_t request) {
    const limit::Settings& settings = runtime.settings;
    const bool kill_policy = settings.oom_policy == limit::OomPolicy::Kill;
    // Only the first refusal of an episode notifies; the exchange makes that
    // hold when several threads are refused at once.
    const bool first = !runtime.oom_episode.exchange(true, std::memory_order_acq_rel);
    if (kill_policy && !first) {
        // Another thread is running the script and will end the process.
        for (;;) {
            pause();
        }
    }
    if (first && settings.oom_script[0] != '\0') {
        run_oom_script(settings.oom_script, settings.oom_script_timeout_ms, device.uuid, request,
                       runtime.state.group_used(device.group_index), device.cap);
    }
    if (kill_policy) {
        char line[384];
        snprintf(line, sizeof(line),
                 "gpulimit: out of memory on %s (request %llu bytes, group usage %llu of cap "
                 "%llu); ending the process as GPU_LIMIT_OOM_POLICY=kill asks\n",
                 device.uuid, static_cast<unsigned long long>(request),
                 static_cast<unsigned long long>(runtime.state.group_used(device.group_index)),
                 static_cast<unsigned long long>(device.cap));
        say(line);
        kill(getpid(), SIGKILL);
        for (;;) {
            pause();
        }
    }
}

} // namespace gpulimit
