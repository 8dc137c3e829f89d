// Tool side (see oci_edit.hpp): uses the standard library, so it must never
// be reached from libgpulimit.so (tests/limiter/abi checks).
#include "gpuinit/limit/oci_edit.hpp"

#include "gpuinit/base/json_value.hpp"
#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "gpuinit/fs/safe_fs.hpp"
#include "gpuinit/fs/sysroot.hpp"

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gpuinit::limit::oci {

namespace {

// The library must be there: a container told to preload a missing file
// would start without the limit (ld.so only warns).
Status check_library(const std::string& library) {
    if (library.size() < 2 || library[0] != '/') {
        return error("the library " + quote(library) + " is not an absolute path");
    }
    auto root = Sysroot::open("/");
    if (!root) {
        return root.error();
    }
    auto file = root->open_file(std::string_view(library).substr(1));
    if (!file) {
        if (file.error().code == ENOENT) {
            return error("the library " + library +
                             " is missing; install gpuinit's libgpulimit.so or give --library PATH",
                         ENOENT);
        }
        return error("the library " + library +
                         " is not a regular file we can open: " + file.error().message,
                     file.error().code);
    }
    return {};
}

} // namespace

Result<std::string> read_bounded(int fd, const std::string& what) {
    std::string text;
    char buffer[65536];
    while (true) {
        ssize_t got = ::read(fd, buffer, sizeof buffer);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno_error("cannot read " + what);
        }
        if (got == 0) {
            return text;
        }
        text.append(buffer, static_cast<size_t>(got));
        if (text.size() > kMaxConfigBytes) {
            return error(what + " is larger than 8 MiB: not an OCI config", EFBIG);
        }
    }
}

Status write_all(int fd, std::string_view data, const std::string& what) {
    while (!data.empty()) {
        ssize_t put = ::write(fd, data.data(), data.size());
        if (put < 0) {
            if (errno == EINTR) {
                continue;
            }
            return errno_error("cannot write " + what);
        }
        data.remove_prefix(static_cast<size_t>(put));
    }
    return {};
}

Result<Edited> edit_config(std::string_view text, std::string group, const Settings& settings) {
    auto spec = parse_spec(text);
    if (!spec) {
        // A config our strict parser refuses but that cannot ask for the
        // limit is the runtime's business, not ours.
        if (text.find("AMP_VGPU_ENABLE") == std::string_view::npos) {
            return Edited{};
        }
        return spec.error();
    }
    if (!limit_requested(*spec)) {
        return Edited{};
    }
    if (group.empty()) {
        if (auto known = group_from_spec(*spec)) {
            group = *known;
        } else {
            auto made = random_group_name();
            if (!made) {
                return made.error();
            }
            group = *made;
        }
    }
    if (!valid_group_name(group)) {
        return error("the container id " + quote(group) +
                     " is not a group name ([A-Za-z0-9._-], 1 to 64 characters)");
    }
    if (auto found = check_library(settings.library); !found) {
        return found.error();
    }
    if (!settings.host_gpus) {
        return error("no reader of the host's GPUs was given (a bug of the caller)", EINVAL);
    }
    auto host = settings.host_gpus();
    if (!host) {
        return host.error();
    }
    auto devices = container_devices(*spec, *host);
    if (!devices) {
        return devices.error();
    }
    auto owner = state_owner(*spec);
    if (!owner) {
        return owner.error();
    }
    if (auto prepared = prepare_host(settings.state_root, group, *owner); !prepared) {
        return prepared.error();
    }
    EditOptions options;
    options.library = settings.library;
    options.state_root = settings.state_root;
    options.group = group;
    options.daemon_socket = daemon_socket_present(settings.state_root);
    options.devices = *devices;
    if (!edit_spec(*spec, options)) {
        return Edited{false, {}, group};
    }
    return Edited{true, serialize_json(*spec), group};
}

Status run_precreate(int in, int out, const Settings& settings) {
    auto text = read_bounded(in, "the config on stdin");
    if (!text) {
        return text.error();
    }
    auto edited = edit_config(*text, {}, settings);
    if (!edited) {
        return edited.error();
    }
    Status written = write_all(out, edited->changed ? edited->text : *text, "stdout");
    if (!written && edited->changed) {
        (void)remove_group(settings.state_root, edited->group);
    }
    return written;
}

Result<Removal> run_poststop(int in, const std::string& state_root) {
    auto text = read_bounded(in, "the state on stdin");
    if (!text) {
        return text.error();
    }
    auto group = group_from_state(*text);
    if (!group) {
        return group.error();
    }
    auto removed = remove_group(state_root, *group);
    if (!removed) {
        return removed.error();
    }
    return Removal{*group, *removed};
}

Status edit_bundle(const RuntimeCall& call, const Settings& settings) {
    if (call.config) {
        return error("crun's --config is not supported by gpu-limit runtime: give the "
                     "bundle's config.json");
    }
    // The bundle is the runtime caller's (root's) choice, as runc takes it:
    // its own path may pass through links; config.json in it may not.
    const std::string bundle = call.bundle.value_or(".");
    auto root = Sysroot::open(bundle);
    if (!root) {
        return error("cannot open the bundle " + bundle + ": " + root.error().message,
                     root.error().code);
    }
    auto dir = SafeDir::open(*root, "");
    if (!dir) {
        return dir.error();
    }
    const std::string config = bundle + "/config.json";
    UniqueFd file(::openat(dir->fd(), "config.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!file.valid()) {
        return errno_error("cannot open " + config);
    }
    struct stat status {};
    if (::fstat(file.get(), &status) != 0 || !S_ISREG(status.st_mode)) {
        return error(config + " is not a regular file");
    }
    auto text = read_bounded(file.get(), "config.json");
    if (!text) {
        return text.error();
    }
    file.reset();
    auto edited = edit_config(*text, call.id, settings);
    if (!edited) {
        return edited.error();
    }
    if (!edited->changed) {
        return {};
    }
    Status written = dir->write_atomic("config.json", edited->text, status.st_mode & 07777);
    if (written && (status.st_uid != ::geteuid() || status.st_gid != ::getegid())) {
        written = dir->chown("config.json", status.st_uid, status.st_gid);
    }
    if (!written) {
        // Not left behind: the group would refuse the container's next try.
        (void)remove_group(settings.state_root, edited->group);
    }
    return written;
}

} // namespace gpuinit::limit::oci
