// The MigControl port over stand-in GPUs (tests/fixture/mig_standin.h),
// for the tests of apply's effects and of the whole command.
#pragma once

#include "gpuinit/mig/apply.hpp"
#include "gpuinit/mig/layout.hpp"
#include "mig_standin.h"

#include <map>
#include <string>
#include <vector>

namespace gpuinit::mig::testing {

inline const char* const kCodes[] = {"success", "?", "invalid argument", "not supported"};

inline std::string code_text(int code) {
    return code < 4 ? kCodes[code] : "NVML error " + std::to_string(code);
}

// The MigControl port over stand-in GPUs, counting the calls that change
// something.
class StandinControl : public MigControl {
  public:
    explicit StandinControl(size_t count) : gpus_(count) {
        for (standin_gpu& gpu : gpus_) {
            standin_h100(&gpu, 1);
        }
    }
    standin_gpu& gpu(unsigned minor) { return gpus_.at(minor); }
    std::map<unsigned, std::vector<unsigned>> pids;
    size_t changes = 0;
    bool with_placements = true; // as nvidia-smi mig -lgipp gives them

    Result<std::vector<MigGpuState>> gpus() override {
        std::vector<MigGpuState> states;
        for (unsigned minor = 0; minor < gpus_.size(); ++minor) {
            const standin_gpu& gpu = gpus_[minor];
            MigGpuState state;
            state.gpu = GpuIdentity{minor, "0000:1" + std::to_string(minor) + ":00.0", {}};
            state.model = "NVIDIA H100 80GB HBM3";
            state.mig = gpu.mig != 0;
            state.mig_after = gpu.mig_pending != 0;
            for (unsigned id = 0; id < STANDIN_MAX_GIS && gpu.mig; ++id) {
                const standin_gi& gi = gpu.gis[id];
                if (!gi.used) {
                    continue;
                }
                GiState made{id, gi.profile->name, {}};
                for (unsigned ci = 0; ci < STANDIN_MAX_CIS; ++ci) {
                    if (gi.cis[ci].used) {
                        char name[40];
                        standin_ci_name(&gi, gi.cis[ci].slices, name, sizeof(name));
                        made.cis.push_back(CiState{ci, name});
                    }
                }
                state.gis.push_back(made);
            }
            state.pids = pids[minor];
            for (unsigned p = 0; p < gpu.profile_count && gpu.mig && with_placements; ++p) {
                const standin_gi_profile& profile = gpu.profiles[p];
                state.placements.push_back(GiPlacements{
                    profile.name, profile.size,
                    std::vector<unsigned>(profile.starts, profile.starts + profile.start_count)});
            }
            states.push_back(state);
        }
        return states;
    }
    Status destroy_ci(const GpuIdentity& gpu, unsigned gi, unsigned ci) override {
        return done(standin_destroy_ci(&gpus_.at(gpu.minor), gi, ci));
    }
    Status destroy_gi(const GpuIdentity& gpu, unsigned gi) override {
        return done(standin_destroy_gi(&gpus_.at(gpu.minor), gi));
    }
    Status set_mig_mode(const GpuIdentity& gpu, bool on) override {
        gpus_.at(gpu.minor).mig_pending = on;
        return done(STANDIN_SUCCESS);
    }
    Status reset(const GpuIdentity& gpu) override {
        standin_reset(&gpus_.at(gpu.minor));
        return done(STANDIN_SUCCESS);
    }
    Result<unsigned> create_gi(const GpuIdentity& gpu, std::string_view profile,
                               std::optional<unsigned> start) override {
        standin_gpu& target = gpus_.at(gpu.minor);
        const standin_gi_profile* found =
            standin_find_profile_named(&target, std::string(profile).c_str());
        if (found == nullptr) {
            return error("no such profile");
        }
        unsigned id = 0;
        if (Status status =
                done(standin_create_gi(&target, found->id, start ? &*start : nullptr, &id));
            !status) {
            return status.error();
        }
        return id;
    }
    Result<unsigned> create_ci(const GpuIdentity& gpu, unsigned gi,
                               std::string_view profile) override {
        standin_gpu& target = gpus_.at(gpu.minor);
        auto slices = ci_slices_in(profile, target.gis[gi].profile->name);
        unsigned id = 0;
        if (Status status = done(standin_create_ci(&target, gi, slices.value_or(0), &id));
            !status) {
            return status.error();
        }
        return id;
    }

  private:
    Status done(int code) {
        ++changes;
        if (code == STANDIN_SUCCESS) {
            return {};
        }
        return error(code == STANDIN_INSUFFICIENT_RESOURCES ? std::string("insufficient resources")
                                                            : code_text(code));
    }
    std::vector<standin_gpu> gpus_;
};

} // namespace gpuinit::mig::testing
