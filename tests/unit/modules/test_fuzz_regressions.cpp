// Inputs the fuzz targets (tests/fuzz) found breaking the modules layer's
// parsers, each kept as a regression test.
#include "gpuinit/modules/option_text.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

// fuzz_module_options, input "\"" NUL "\xdd": the first layer's open quote
// took the second layer in, giving one word "\" \xdd". A modprobe.d line
// with an open quote would so swallow the command line's options.
TEST(FuzzRegressions, OpenQuoteDoesNotSwallowTheNextLayer) {
    EXPECT_EQ(merge_module_options({"\"", "\xdd"}), "\"\" \xdd");
    EXPECT_EQ(merge_module_options({"NVreg_RegistryDwords=\"a=1", "NVreg_ModifyDeviceFiles=0"}),
              "NVreg_RegistryDwords=\"a=1\" NVreg_ModifyDeviceFiles=0");
    // The later layer still replaces a key the open quote's layer set.
    EXPECT_EQ(merge_module_options({"a=1 s=\"x y", "a=2"}), "a=2 s=\"x y\"");
    // Idempotent on its own output.
    std::string merged = merge_module_options({"k=\"open", "k2=1"});
    EXPECT_EQ(merge_module_options({merged}), merged);
    EXPECT_EQ(option_words(merged), (std::vector<std::string>{"k=\"open\"", "k2=1"}));
}

} // namespace gpuinit
