#include "gpuinit/host/gpu_selector.hpp"

#include "gpuinit/base/text.hpp"
#include "gpuinit/host/gpu_information.hpp"
#include "gpuinit/host/pci.hpp"

#include <cerrno>
#include <strings.h>

namespace gpuinit {

bool valid_gpu_uuid(std::string_view text) {
    constexpr std::string_view kPrefix = "GPU-";
    if (!text.starts_with(kPrefix) || text.size() == kPrefix.size() || text.size() > 64) {
        return false;
    }
    for (char c : text.substr(kPrefix.size())) {
        bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (!hex && c != '-') {
            return false;
        }
    }
    return true;
}

bool same_uuid(std::string_view a, std::string_view b) {
    return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

Result<GpuSelector> GpuSelector::parse(std::string_view text) {
    GpuSelector selector;
    if (auto minor = parse_decimal(text, kMaxGpuMinor)) {
        selector.kind_ = Kind::Minor;
        selector.minor_ = static_cast<unsigned>(*minor);
    } else if (auto bdf = normalize_bdf(text)) {
        selector.kind_ = Kind::Bdf;
        selector.key_ = *bdf;
    } else if (valid_gpu_uuid(text)) {
        selector.kind_ = Kind::Uuid;
        selector.key_ = text;
    } else {
        return error(quote(text) + format(" is not a GPU minor (0-%u), a PCI address such as"
                                          " 0000:17:00.0 or a GPU UUID (GPU-...)",
                                          kMaxGpuMinor),
                     EINVAL);
    }
    return selector;
}

bool GpuSelector::matches(const GpuIdentity& gpu) const {
    switch (kind_) {
    case Kind::Minor:
        return gpu.minor == minor_;
    case Kind::Bdf:
        return gpu.bdf == key_;
    case Kind::Uuid:
        return !gpu.uuid.empty() && same_uuid(gpu.uuid, key_);
    }
    return false;
}

bool GpuSelector::same_as(const GpuSelector& other) const {
    if (kind_ != other.kind_) {
        return false;
    }
    switch (kind_) {
    case Kind::Minor:
        return minor_ == other.minor_;
    case Kind::Bdf:
        return key_ == other.key_;
    case Kind::Uuid:
        return same_uuid(key_, other.key_);
    }
    return false;
}

std::string GpuSelector::text() const {
    return kind_ == Kind::Minor ? std::to_string(minor_) : key_;
}

} // namespace gpuinit
