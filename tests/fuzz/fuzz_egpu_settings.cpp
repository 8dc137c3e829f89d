// The eGPU variables as a container's environment hands them to
// libgpulimit.so: parse_settings either accepts them or refuses with one
// safe line, never crashes, and whatever it accepts gives caps that never
// exceed the card's physical memory.
//
// Input: NAME=VALUE entries separated by NUL bytes. AMP_VGPU_ENABLE=1 is
// added unless the input sets it, so that most inputs reach the parser.
#include "fuzz_check.hpp"
#include "gpuinit/limit/egpu.hpp"

#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace gpuinit;
using namespace gpuinit::fuzz;

struct Environment {
    std::vector<std::pair<std::string, std::string>> variables;
};

const char* lookup(const char* name, void* context) {
    const auto* environment = static_cast<const Environment*>(context);
    // The last assignment wins, as in a real environment built by setenv.
    for (auto it = environment->variables.rbegin(); it != environment->variables.rend(); ++it) {
        if (it->first == name) {
            return it->second.c_str();
        }
    }
    return nullptr;
}

bool ends_in_nul(const char* text, size_t size) {
    return std::memchr(text, '\0', size) != nullptr;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Environment environment;
    environment.variables.emplace_back("AMP_VGPU_ENABLE", "1");
    for (std::string_view part : split_at_nul(as_text(data, size))) {
        size_t equals = part.find('=');
        if (equals == std::string_view::npos) {
            continue;
        }
        environment.variables.emplace_back(std::string(part.substr(0, equals)),
                                           std::string(part.substr(equals + 1)));
    }

    // Settings holds paths of 4 KiB and a 64-entry list: too big for
    // libFuzzer's stack habits, so it lives on the heap here.
    auto settings = std::make_unique<limit::Settings>();
    limit::Problem problem;
    bool accepted = limit::parse_settings(lookup, &environment, *settings, problem);
    FUZZ_CHECK(ends_in_nul(problem.text, sizeof problem.text));
    if (!accepted) {
        FUZZ_CHECK(problem.set());
        FUZZ_CHECK(one_safe_line(problem.text));
        return 0;
    }
    FUZZ_CHECK(!problem.set());
    if (!settings->enabled) {
        return 0;
    }
    FUZZ_CHECK(ends_in_nul(settings->group, sizeof settings->group));
    FUZZ_CHECK(ends_in_nul(settings->oom_script, sizeof settings->oom_script));
    FUZZ_CHECK(settings->oom_script[0] == '\0' || settings->oom_script[0] == '/');
    FUZZ_CHECK(settings->visible.count >= 0 && settings->visible.count <= limit::kMaxListedDevices);

    for (uint64_t total :
         {uint64_t{16160} * limit::kMiB, uint64_t{80} * limit::kGiB, uint64_t{1}, ~uint64_t{0}}) {
        uint64_t cap = 0;
        limit::Problem cap_problem;
        if (limit::device_cap(*settings, total, cap, cap_problem)) {
            FUZZ_CHECK(cap <= total);
            FUZZ_CHECK(!cap_problem.set());
        } else {
            FUZZ_CHECK(one_safe_line(cap_problem.text));
        }
    }
    for (const limit::VisibleDevices* list : {&settings->visible, &settings->host_devices}) {
        for (int i = 0; i < list->count; ++i) {
            const limit::ListedDevice& entry = list->entries[i];
            limit::SeenDevice device;
            device.uuid = "GPU-none";
            switch (entry.kind) {
            case limit::ListedDevice::Kind::Uuid:
                FUZZ_CHECK(ends_in_nul(entry.uuid, sizeof entry.uuid));
                device.uuid = entry.uuid;
                break;
            case limit::ListedDevice::Kind::Index:
                FUZZ_CHECK(list == &settings->visible);
                if (entry.index > 0x7fffffff) {
                    continue; // no host has that many GPUs
                }
                device.host_index = static_cast<int>(entry.index);
                break;
            case limit::ListedDevice::Kind::Pci:
                FUZZ_CHECK(list == &settings->host_devices);
                device.pci_known = true;
                device.pci = entry.pci;
                break;
            }
            FUZZ_CHECK(limit::device_listed(*list, device));
        }
    }
    return 0;
}
