// Where gpu-mig takes names from: the names file for job-side commands when
// it covers every instance, the driver otherwise (here it never answers: no
// libnvidia-ml.so.1, no nvidia-smi on PATH), the file again for what it has
// when the driver does not answer; sync (Driver) never reads the file.
#include "gpuinit/mig/leases.hpp"
#include "gpuinit/mig/names_file.hpp"
#include "gpuinit/mig/names_source.hpp"
#include "mig_box.hpp"

#include <cstdlib>
#include <gtest/gtest.h>

namespace gpuinit {

namespace {

constexpr const char* kUuid = "MIG-3c4c5a27-1007-5001-a000-007e5494657a";

bool mentions(const Diagnostics& diagnostics, const std::string& text) {
    for (const Diagnostic& item : diagnostics.items()) {
        if (item.text().find(text) != std::string::npos) {
            return true;
        }
    }
    return false;
}

// The box, its leases, and a names file that names only gpu1/gi7/ci0.
struct SourceBox {
    testing::MigBox box;
    std::optional<Sysroot> root;
    std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
    SourceBox() {
        ::setenv("PATH", "/nonexistent", 1);
        testing::load_mig_box(box);
        auto opened = Sysroot::open(box.dir.path());
        root.emplace(std::move(*opened));
        Diagnostics diagnostics;
        EXPECT_TRUE(sync_leases(*root, box.instances, {}, true, diagnostics));
        std::vector<MigInstance> named = box.instances;
        named[0].profile = "1g.10gb";
        named[0].uuid = kUuid;
        EXPECT_TRUE(write_mig_names_file(*root, render_mig_names_file(named, "test")));
    }
    ~SourceBox() { ::setenv("PATH", path.c_str(), 1); }
    SourceBox(const SourceBox&) = delete;
    SourceBox& operator=(const SourceBox&) = delete;
};

} // namespace

TEST(MigNamesSource, AFileLackingSomeIsUsedOnlyWhenTheDriverDoesNotAnswer) {
    SourceBox s;
    Diagnostics diagnostics;
    auto source =
        name_mig_instances(*s.root, {"", MigNamesFirst::File}, s.box.instances, diagnostics);
    ASSERT_TRUE(source);
    EXPECT_NE(source->find("run/gpu-mig/names"), std::string::npos) << *source;
    EXPECT_EQ(s.box.instances[0].uuid, kUuid);
    EXPECT_EQ(s.box.instances[1].uuid, "");
    // One warning: what the file lacks, and why the driver did not answer.
    ASSERT_EQ(diagnostics.items().size(), 1u);
    EXPECT_TRUE(mentions(diagnostics, "20 MIG instances have no profile name or MIG UUID"));
    EXPECT_TRUE(mentions(diagnostics, "run/gpu-mig/names: "));
    EXPECT_TRUE(mentions(diagnostics, "nvidia-smi is not on PATH"));
}

TEST(MigNamesSource, SyncAsksTheDriverNeverTheFile) {
    SourceBox s;
    Diagnostics diagnostics;
    auto source =
        name_mig_instances(*s.root, {"", MigNamesFirst::Driver}, s.box.instances, diagnostics);
    ASSERT_TRUE(source);
    EXPECT_EQ(*source, "");
    EXPECT_EQ(s.box.instances[0].uuid, "");
    ASSERT_EQ(diagnostics.items().size(), 1u);
    EXPECT_TRUE(mentions(diagnostics, "21 MIG instances have no profile name or MIG UUID"));
    EXPECT_TRUE(mentions(diagnostics, "nvidia-smi is not on PATH"));
    EXPECT_LE(diagnostics.items()[0].text().size(), 260u) << diagnostics.items()[0].text();
}

TEST(MigNamesSource, SavedOutputTheAdminNamedMustBeReadable) {
    SourceBox s;
    Diagnostics diagnostics;
    EXPECT_FALSE(name_mig_instances(*s.root, {s.box.dir / "no-such-dir", MigNamesFirst::File},
                                    s.box.instances, diagnostics));
}

} // namespace gpuinit
