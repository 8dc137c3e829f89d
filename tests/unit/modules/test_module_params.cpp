// NVreg options against the parameters a module declares: the pure check.
#include "gpuinit/modules/module_params.hpp"

#include <gtest/gtest.h>

namespace gpuinit {

namespace {

// As NVIDIA declares them: NV_MODULE_PARAMETER is module_param(x, int, 0),
// NV_MODULE_STRING_PARAMETER module_param(x, charp, 0)
// (open-gpu-kernel-modules 595.45.04, kernel-open/common/inc/nv-linux.h).
std::vector<ModuleParam> nvidia_params() {
    return params_from_modinfo({{"name", "nvidia"},
                                {"parmtype", "NVreg_DeviceFileUID:int"},
                                {"parmtype", "NVreg_DeviceFileGID:int"},
                                {"parmtype", "NVreg_DeviceFileMode:int"},
                                {"parmtype", "NVreg_ModifyDeviceFiles:int"},
                                {"parmtype", "NVreg_RegistryDwords:charp"},
                                {"parm", "NVreg_Described:only described"}});
}

ModuleOption from_file(std::string word, size_t line = 3) {
    return {std::move(word), Location::in_file("/etc/modprobe.d/nvidia.conf", line)};
}

std::vector<std::string> texts(const std::vector<OptionFinding>& findings) {
    std::vector<std::string> out;
    for (const OptionFinding& finding : findings) {
        out.push_back(finding.diagnostic.text());
    }
    return out;
}

} // namespace

TEST(ModuleParams, ParmAndParmtypeMakeOneTable) {
    std::vector<ModuleParam> params = params_from_modinfo({{"parm", "a:the a"},
                                                           {"parmtype", "a:uint"},
                                                           {"parmtype", "b:charp"},
                                                           {"alias", "pci:x"},
                                                           {"parm", ":nameless"}});
    ASSERT_EQ(params.size(), 2u);
    EXPECT_EQ(params[0].name, "a");
    EXPECT_EQ(params[0].type, "uint");
    EXPECT_EQ(params[1].name, "b");
    EXPECT_EQ(params[1].type, "charp");
}

TEST(ModuleParams, ValuesAsTheKernelParsesThem) {
    EXPECT_TRUE(param_value_fits("int", "0660"));
    EXPECT_TRUE(param_value_fits("int", "0x1b6"));
    EXPECT_TRUE(param_value_fits("int", "-1"));
    EXPECT_TRUE(param_value_fits("int", "+7"));
    EXPECT_TRUE(param_value_fits("int", "2147483647"));
    EXPECT_TRUE(param_value_fits("int", "-2147483648"));
    EXPECT_FALSE(param_value_fits("int", "2147483648"));
    EXPECT_FALSE(param_value_fits("int", "4294967295")); // ~0 must be written -1
    EXPECT_FALSE(param_value_fits("int", "abc"));
    EXPECT_FALSE(param_value_fits("int", "0660 "));
    EXPECT_FALSE(param_value_fits("int", "089")); // octal
    EXPECT_FALSE(param_value_fits("int", ""));
    EXPECT_FALSE(param_value_fits("int", std::nullopt));
    EXPECT_TRUE(param_value_fits("uint", "4294967295"));
    EXPECT_FALSE(param_value_fits("uint", "-1"));
    EXPECT_FALSE(param_value_fits("uint", "4294967296"));
    EXPECT_TRUE(param_value_fits("byte", "255"));
    EXPECT_FALSE(param_value_fits("byte", "256"));
    EXPECT_TRUE(param_value_fits("ulong", "18446744073709551615"));
    EXPECT_FALSE(param_value_fits("ulong", "18446744073709551616"));
    EXPECT_TRUE(param_value_fits("bool", std::nullopt));
    EXPECT_TRUE(param_value_fits("bool", "Y"));
    EXPECT_TRUE(param_value_fits("bool", "off"));
    EXPECT_FALSE(param_value_fits("bool", "maybe"));
    EXPECT_TRUE(param_value_fits("charp", "RMUseSwI2c=0x01;RMI2cSpeed=100"));
    EXPECT_TRUE(param_value_fits("charp", ""));
    EXPECT_FALSE(param_value_fits("charp", std::string(1025, 'x')));
    EXPECT_TRUE(param_value_fits("array of int", "1,-2,0x3"));
    EXPECT_FALSE(param_value_fits("array of int", "1,x"));
    EXPECT_TRUE(param_value_fits("", "anything"));
}

// kernel/params.c parse_one(): a bare NAME reaches the type's set() only when
// its ops carry KERNEL_PARAM_OPS_FL_NOARG (param_ops_bool, _bint and
// _bool_enable_only; not param_ops_invbool, which the kernel refuses bare).
TEST(ModuleParams, BareNamesAsTheKernelTakesThem) {
    EXPECT_TRUE(param_value_fits("bint", std::nullopt));
    EXPECT_TRUE(param_value_fits("bool_enable_only", std::nullopt));
    EXPECT_TRUE(param_value_fits("bool_enable_only", "on"));
    EXPECT_FALSE(param_value_fits("bool_enable_only", "maybe"));
    EXPECT_FALSE(param_value_fits("invbool", std::nullopt));
    EXPECT_TRUE(param_value_fits("invbool", "n"));
    EXPECT_FALSE(param_value_fits("string", std::nullopt));
    EXPECT_FALSE(param_value_fits("charp", std::nullopt));
    EXPECT_FALSE(param_value_fits("array of int", std::nullopt));
    // A module's own type (module_param_cb with its ops) may take it.
    EXPECT_TRUE(param_value_fits("mytype", std::nullopt));
}

TEST(ModuleParams, GoodOptionsPass) {
    EXPECT_TRUE(check_module_options("nvidia",
                                     {from_file("NVreg_DeviceFileUID=0"),
                                      from_file("NVreg_DeviceFileMode=0660"),
                                      from_file("NVreg-ModifyDeviceFiles=0"),
                                      from_file("NVreg_RegistryDwords=\"a=1;b=2\""),
                                      from_file("NVreg_Described=x"), from_file("dyndbg=+p")},
                                     nvidia_params())
                    .empty());
}

TEST(ModuleParams, UnknownNameSaysWhereAndTheLikelyName) {
    auto findings =
        check_module_options("nvidia", {from_file("NVreg_DeviceFileMod=0600", 7)}, nvidia_params());
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].problem, OptionProblem::UnknownName);
    EXPECT_EQ(texts(findings)[0],
              "/etc/modprobe.d/nvidia.conf:7: NVreg_DeviceFileMod=0600: nvidia declares no"
              " parameter NVreg_DeviceFileMod (did you mean NVreg_DeviceFileMode?), so the kernel"
              " would ignore it: correct the name or remove the option");
    // Nothing close: no guess.
    findings = check_module_options("nvidia", {{"Bogus=1", {}}}, nvidia_params());
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(texts(findings)[0],
              "Bogus=1 (command line): nvidia declares no parameter Bogus, so the kernel would"
              " ignore it: correct the name or remove the option");
}

TEST(ModuleParams, ValueOfTheWrongTypeSaysTheType) {
    auto findings =
        check_module_options("nvidia", {{"NVreg_DeviceFileMode=abc", {}}}, nvidia_params());
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].problem, OptionProblem::BadValue);
    EXPECT_EQ(texts(findings)[0],
              "NVreg_DeviceFileMode=abc (command line): nvidia's NVreg_DeviceFileMode is an int (a"
              " 32-bit number: decimal, 0x hex or 0 octal), not 'abc', so the kernel would refuse"
              " to load nvidia: give it a valid value");
    findings = check_module_options("nvidia", {from_file("NVreg_DeviceFileGID")}, nvidia_params());
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_NE(texts(findings)[0].find("not no value"), std::string::npos) << texts(findings)[0];
}

// A module's .modinfo is input too: module_param_array() makes "array of
// TYPE" with a standard TYPE, never an array of arrays, so a deeper nesting
// is a type this does not know (taken as it is), not a recursion as deep as
// the entry is long.
TEST(ModuleParams, AHostileArrayTypeIsNoDeepRecursion) {
    std::string type;
    for (int i = 0; i < 200000; ++i) {
        type += "array of ";
    }
    type += "int";
    auto params = params_from_modinfo({{"parmtype", "deep:" + type}});
    ASSERT_EQ(params.size(), 1u);
    EXPECT_TRUE(check_module_options("m", {{"deep=x", {}}}, params).empty());
    EXPECT_TRUE(param_value_fits("array of array of int", "x"));
    EXPECT_FALSE(param_value_fits("array of int", "x"));
}

// kernel/params.c next_arg(): only a quote that opens the word or the value
// has its closing one taken off; a stray trailing quote stays in the value.
TEST(ModuleParams, QuotesAsTheKernelTakesThemOff) {
    for (const char* word : {"NVreg_DeviceFileMode=\"0660\"", "\"NVreg_DeviceFileMode=0660\"",
                             "NVreg_DeviceFileMode=\"0660"}) {
        EXPECT_TRUE(check_module_options("nvidia", {{word, {}}}, nvidia_params()).empty()) << word;
    }
    auto findings =
        check_module_options("nvidia", {{"NVreg_DeviceFileMode=0660\"", {}}}, nvidia_params());
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].problem, OptionProblem::BadValue);
}

TEST(ModuleParams, ModifyDeviceFilesOtherThanZeroUndoesThePolicy) {
    for (const char* word : {"NVreg_ModifyDeviceFiles=1", "NVreg_ModifyDeviceFiles=0x1",
                             "NVreg_ModifyDeviceFiles=-1"}) {
        auto findings = check_module_options("nvidia", {from_file(word, 2)}, nvidia_params());
        ASSERT_EQ(findings.size(), 1u) << word;
        EXPECT_EQ(findings[0].problem, OptionProblem::UndoesPolicy) << word;
        EXPECT_EQ(findings[0].diagnostic.where.line, 2u);
        EXPECT_NE(texts(findings)[0].find("set NVreg_ModifyDeviceFiles=0"), std::string::npos);
    }
    // kstrtoint() takes "-0" and "+0x0" as 0 (lib/kstrtox.c kstrtoll).
    for (const char* word : {"NVreg_ModifyDeviceFiles=0", "NVreg_ModifyDeviceFiles=00",
                             "NVreg_ModifyDeviceFiles=-0", "NVreg_ModifyDeviceFiles=+0x0"}) {
        EXPECT_TRUE(check_module_options("nvidia", {from_file(word)}, nvidia_params()).empty())
            << word;
    }
    // Another module's parameter of that name is not the driver's.
    EXPECT_TRUE(
        check_module_options("other", {from_file("NVreg_ModifyDeviceFiles=1")}, nvidia_params())
            .empty());
}

TEST(ModuleParams, EachBadOptionIsOneFinding) {
    auto findings = check_module_options(
        "nvidia",
        {from_file("NVreg_DeviceFileMod=0600", 1), from_file("NVreg_DeviceFileMode=abc", 2),
         from_file("NVreg_ModifyDeviceFiles=1", 3), from_file("NVreg_DeviceFileUID=0", 4)},
        nvidia_params());
    ASSERT_EQ(findings.size(), 3u);
    EXPECT_EQ(findings[0].problem, OptionProblem::UnknownName);
    EXPECT_EQ(findings[1].problem, OptionProblem::BadValue);
    EXPECT_EQ(findings[2].problem, OptionProblem::UndoesPolicy);
}

TEST(ModuleParams, AModuleWithoutParametersTakesNone) {
    auto findings = check_module_options("nvidia_uvm", {{"uvm_x=1", {}}}, {});
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].problem, OptionProblem::UnknownName);
}

} // namespace gpuinit
