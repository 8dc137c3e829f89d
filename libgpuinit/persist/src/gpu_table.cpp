#include "gpuinit/persist/gpu_table.hpp"

#include "gpuinit/base/text.hpp"

#include <algorithm>
#include <cerrno>

namespace gpuinit {

const char* hold_state_name(HoldState state) {
    switch (state) {
    case HoldState::Opening:
        return "opening";
    case HoldState::Held:
        return "held";
    case HoldState::Failed:
        return "failed";
    case HoldState::WaitingForNode:
        return "waiting-for-node";
    case HoldState::Disabled:
        return "disabled";
    case HoldState::Lost:
        return "lost";
    case HoldState::Unbinding:
        return "unbinding";
    }
    return "unknown";
}

namespace {

PersistAction open_action(const HeldGpu& gpu) {
    return {PersistAction::Kind::Open, gpu.id.bdf, gpu.id.minor};
}

PersistAction close_action(const HeldGpu& gpu) {
    return {PersistAction::Kind::Close, gpu.id.bdf, gpu.id.minor};
}

bool choice_matches(const DisabledGpu& choice, const GpuIdentity& id) {
    if (!choice.uuid.empty() && !id.uuid.empty()) {
        return same_uuid(choice.uuid, id.uuid);
    }
    return choice.bdf == id.bdf;
}

bool choice_selected(const DisabledGpu& choice, const GpuSelector& selector) {
    switch (selector.kind()) {
    case GpuSelector::Kind::Uuid:
        return same_uuid(choice.uuid, selector.key());
    case GpuSelector::Kind::Bdf:
        return choice.bdf == selector.key();
    case GpuSelector::Kind::Minor:
        return false; // a minor names only a GPU that is bound now
    }
    return false;
}

Diagnostic no_gpu_matches(const GpuSelector& selector) {
    return error("no GPU matches " + selector.text() +
                     ": `gpu-persist status` lists the GPUs the driver has bound",
                 ENODEV);
}

} // namespace

void GpuTable::load_choices(std::vector<DisabledGpu> disabled) {
    disabled_ = std::move(disabled);
}

HeldGpu* GpuTable::find_mutable(std::string_view bdf) {
    auto it = std::find_if(gpus_.begin(), gpus_.end(),
                           [&](const HeldGpu& gpu) { return gpu.id.bdf == bdf; });
    return it == gpus_.end() ? nullptr : &*it;
}

const HeldGpu* GpuTable::find(std::string_view bdf) const {
    return const_cast<GpuTable*>(this)->find_mutable(bdf);
}

bool GpuTable::is_disabled(const GpuIdentity& id) const {
    return std::any_of(disabled_.begin(), disabled_.end(),
                       [&](const DisabledGpu& choice) { return choice_matches(choice, id); });
}

bool GpuTable::set_choice(const GpuIdentity& id, bool wanted) {
    if (wanted) {
        auto removed = std::erase_if(
            disabled_, [&](const DisabledGpu& choice) { return choice_matches(choice, id); });
        return removed > 0;
    }
    if (is_disabled(id)) {
        return false;
    }
    disabled_.push_back({id.uuid, id.bdf});
    return true;
}

GpuTable::Actions GpuTable::gpu_present(const GpuIdentity& id) {
    Actions actions;
    if (HeldGpu* known = find_mutable(id.bdf)) {
        if (known->id.minor == id.minor && known->id.uuid == id.uuid) {
            return actions;
        }
        // Rebound under another minor while we were not told: start over.
        actions = gpu_gone(id.bdf);
    }
    HeldGpu gpu;
    gpu.id = id;
    gpu.wanted = !is_disabled(id);
    gpu.state = gpu.wanted ? HoldState::Opening : HoldState::Disabled;
    if (gpu.wanted) {
        actions.push_back(open_action(gpu));
    }
    auto at = std::lower_bound(gpus_.begin(), gpus_.end(), id.minor,
                               [](const HeldGpu& g, unsigned minor) { return g.id.minor < minor; });
    gpus_.insert(at, std::move(gpu));
    return actions;
}

GpuTable::Actions GpuTable::gpu_gone(std::string_view bdf) {
    Actions actions;
    auto it = std::find_if(gpus_.begin(), gpus_.end(),
                           [&](const HeldGpu& gpu) { return gpu.id.bdf == bdf; });
    if (it == gpus_.end()) {
        return actions;
    }
    if (it->state == HoldState::Held || it->state == HoldState::Opening) {
        actions.push_back(close_action(*it));
    }
    gpus_.erase(it);
    return actions;
}

GpuTable::Actions GpuTable::open_succeeded(std::string_view bdf) {
    HeldGpu* gpu = find_mutable(bdf);
    if (gpu == nullptr || gpu->state != HoldState::Opening) {
        return {};
    }
    gpu->error_code = 0;
    gpu->error.clear();
    if (!gpu->wanted) {
        // Disabled while the driver was initializing it.
        gpu->state = HoldState::Disabled;
        return {close_action(*gpu)};
    }
    gpu->state = HoldState::Held;
    return {};
}

GpuTable::Actions GpuTable::open_failed(std::string_view bdf, int code, std::string message) {
    HeldGpu* gpu = find_mutable(bdf);
    if (gpu == nullptr || gpu->state != HoldState::Opening) {
        return {};
    }
    gpu->error_code = code;
    gpu->error = std::move(message);
    if (!gpu->wanted) {
        gpu->state = HoldState::Disabled;
    } else {
        gpu->state = code == ENOENT ? HoldState::WaitingForNode : HoldState::Failed;
    }
    return {};
}

GpuTable::Actions GpuTable::hangup(std::string_view bdf) {
    HeldGpu* gpu = find_mutable(bdf);
    if (gpu == nullptr || gpu->state != HoldState::Held) {
        return {};
    }
    gpu->state = HoldState::Lost;
    gpu->error_code = EIO;
    gpu->error = "the driver reports the GPU lost (POLLHUP): released; see the kernel log";
    return {close_action(*gpu)};
}

GpuTable::Actions GpuTable::unbinding(std::string_view bdf) {
    HeldGpu* gpu = find_mutable(bdf);
    if (gpu == nullptr || gpu->state != HoldState::Held) {
        return {};
    }
    gpu->state = HoldState::Unbinding;
    gpu->error_code = ENODEV;
    gpu->error = "the kernel is unbinding or removing it and waited for gpu-persist: released; "
                 "`gpu-persist disable` first spares that wait";
    return {close_action(*gpu)};
}

GpuTable::Actions GpuTable::nodes_changed() {
    Actions actions;
    for (HeldGpu& gpu : gpus_) {
        if (gpu.state == HoldState::WaitingForNode && gpu.wanted) {
            gpu.state = HoldState::Opening;
            actions.push_back(open_action(gpu));
        }
    }
    return actions;
}

Result<GpuTable::Actions> GpuTable::enable(const std::optional<GpuSelector>& selector) {
    Actions actions;
    bool matched = false;
    bool changed = false;
    for (HeldGpu& gpu : gpus_) {
        if (selector && !selector->matches(gpu.id)) {
            continue;
        }
        matched = true;
        gpu.wanted = true;
        changed |= set_choice(gpu.id, true);
        switch (gpu.state) {
        case HoldState::Opening:
        case HoldState::Held:
            break;
        case HoldState::Failed:
        case HoldState::WaitingForNode:
        case HoldState::Disabled:
        case HoldState::Lost:
        case HoldState::Unbinding:
            gpu.state = HoldState::Opening;
            actions.push_back(open_action(gpu));
            break;
        }
    }
    // Choices remembered for GPUs that are not bound now.
    auto removed = std::erase_if(disabled_, [&](const DisabledGpu& choice) {
        return !selector || choice_selected(choice, *selector);
    });
    if (removed > 0) {
        matched = changed = true;
    }
    if (selector && !matched) {
        return no_gpu_matches(*selector);
    }
    if (changed) {
        actions.push_back({PersistAction::Kind::SaveChoices, {}, 0});
    }
    return actions;
}

Result<GpuTable::Actions> GpuTable::disable(const std::optional<GpuSelector>& selector) {
    Actions actions;
    bool matched = false;
    bool changed = false;
    for (HeldGpu& gpu : gpus_) {
        if (selector && !selector->matches(gpu.id)) {
            continue;
        }
        matched = true;
        gpu.wanted = false;
        changed |= set_choice(gpu.id, false);
        switch (gpu.state) {
        case HoldState::Opening:
            break; // closed when its init finishes (open_succeeded)
        case HoldState::Held:
            gpu.state = HoldState::Disabled;
            actions.push_back(close_action(gpu));
            break;
        case HoldState::Failed:
        case HoldState::WaitingForNode:
        case HoldState::Lost:
        case HoldState::Unbinding:
        case HoldState::Disabled:
            gpu.state = HoldState::Disabled;
            break;
        }
    }
    if (selector && !matched) {
        return no_gpu_matches(*selector);
    }
    if (changed) {
        actions.push_back({PersistAction::Kind::SaveChoices, {}, 0});
    }
    return actions;
}

GpuTable::Actions GpuTable::release_all() {
    Actions actions;
    for (HeldGpu& gpu : gpus_) {
        if (gpu.state == HoldState::Held || gpu.state == HoldState::Opening) {
            actions.push_back(close_action(gpu));
        }
    }
    return actions;
}

bool GpuTable::settled() const {
    return count(HoldState::Opening) == 0;
}

size_t GpuTable::count(HoldState state) const {
    return static_cast<size_t>(std::count_if(
        gpus_.begin(), gpus_.end(), [&](const HeldGpu& gpu) { return gpu.state == state; }));
}

std::vector<DisabledGpu> parse_choices(std::string_view text, std::string_view source,
                                       Diagnostics& diagnostics) {
    std::vector<DisabledGpu> disabled;
    size_t number = 0;
    for (std::string_view line : split_lines(text)) {
        ++number;
        line = trim(line);
        if (line.empty() || line.front() == '#') {
            continue;
        }
        auto words = split_words(line);
        auto bdf = GpuSelector::parse(words.size() == 3 ? words[2] : std::string_view());
        bool uuid_ok = words.size() == 3 && (words[1] == "-" || valid_gpu_uuid(words[1]));
        if (words.size() != 3 || words[0] != "disabled" || !uuid_ok || !bdf ||
            bdf->kind() != GpuSelector::Kind::Bdf) {
            Diagnostic skipped = parse_error(source, number,
                                             "skipped " + quote(line) +
                                                 ": expected `disabled UUID|- PCI-ADDRESS`; "
                                                 "`gpu-persist enable|disable` rewrites the file");
            skipped.severity = Severity::Warning;
            diagnostics.add(std::move(skipped));
            continue;
        }
        DisabledGpu choice{words[1] == "-" ? std::string() : std::string(words[1]), bdf->key()};
        if (std::find(disabled.begin(), disabled.end(), choice) == disabled.end()) {
            disabled.push_back(std::move(choice));
        }
    }
    return disabled;
}

std::string format_choices(const std::vector<DisabledGpu>& disabled) {
    std::string text = "# gpu-persist: GPUs the admin disabled (`gpu-persist enable` undoes).\n"
                       "# Written by gpu-persist; edits are read at start and on SIGHUP.\n";
    for (const DisabledGpu& choice : disabled) {
        text += "disabled " + (choice.uuid.empty() ? std::string("-") : choice.uuid) + " " +
                choice.bdf + "\n";
    }
    return text;
}

size_t count_not_held(const std::vector<HeldGpu>& gpus) {
    size_t missing = 0;
    for (const HeldGpu& gpu : gpus) {
        missing += gpu.wanted && gpu.state != HoldState::Held && gpu.state != HoldState::Opening &&
                           gpu.state != HoldState::Disabled
                       ? 1
                       : 0;
    }
    return missing;
}

} // namespace gpuinit
