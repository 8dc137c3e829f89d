#include "gpuinit/base/spawn.hpp"

#include "gpuinit/base/unique_fd.hpp"

#include <cerrno>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gpuinit {

namespace {

// Owns posix_spawn's file actions.
class FileActions {
  public:
    FileActions() { posix_spawn_file_actions_init(&actions_); }
    ~FileActions() { posix_spawn_file_actions_destroy(&actions_); }
    FileActions(const FileActions&) = delete;
    FileActions& operator=(const FileActions&) = delete;
    posix_spawn_file_actions_t* get() { return &actions_; }

  private:
    posix_spawn_file_actions_t actions_{};
};

} // namespace

Result<int> run_program(const SpawnRequest& request) {
    if (request.argv.empty()) {
        return error("run_program: no program given", EINVAL);
    }
    std::vector<char*> args;
    args.reserve(request.argv.size() + 1);
    for (const std::string& arg : request.argv) {
        args.push_back(const_cast<char*>(arg.c_str()));
    }
    args.push_back(nullptr);
    std::vector<char*> env;
    for (char** e = environ; *e != nullptr; ++e) {
        env.push_back(*e);
    }
    for (const std::string& extra : request.extra_env) {
        env.push_back(const_cast<char*>(extra.c_str()));
    }
    env.push_back(nullptr);

    FileActions actions;
    UniqueFd read_end;
    UniqueFd write_end;
    if (request.output != nullptr) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) {
            return errno_error("cannot make a pipe for " + request.argv[0]);
        }
        read_end.reset(fds[0]);
        write_end.reset(fds[1]);
        posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), 1);
        posix_spawn_file_actions_adddup2(actions.get(), write_end.get(), 2);
    }
    pid_t pid = 0;
    int spawned = posix_spawn(&pid, args[0], actions.get(), nullptr, args.data(), env.data());
    write_end.reset();
    if (spawned != 0) {
        return os_error(spawned, "cannot run " + request.argv[0]);
    }
    if (request.output != nullptr) {
        char buffer[4096];
        for (;;) {
            ssize_t n = ::read(read_end.get(), buffer, sizeof buffer);
            if (n < 0 && errno == EINTR) {
                continue;
            }
            if (n <= 0) {
                break;
            }
            request.output->append(buffer, static_cast<size_t>(n));
        }
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) != pid) {
        if (errno != EINTR) {
            return errno_error("cannot wait for " + request.argv[0]);
        }
    }
    if (WIFSIGNALED(status)) {
        return 128 + WTERMSIG(status);
    }
    return WEXITSTATUS(status);
}

} // namespace gpuinit
