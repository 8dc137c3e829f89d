// gpuinit-fuzz-seeds SOURCE_DIR OUT_DIR: writes the seed corpus of every
// fuzz target, OUT_DIR/<target>/seed-NNN, so that no corpus lives in the
// repository. Real-looking files come from the fixture machines of
// tests/fixture (written to a temporary root and read back), from the real
// captures in tests/fixture/captures and from the shipped modprobe.d file;
// tricky inputs are listed here by hand.
#include "gpuinit/base/text.hpp"
#include "gpuinit/base/unique_fd.hpp"
#include "machine_fixture.hpp"
#include "nvidia_smi_text.hpp"
#include "temp_dir.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

using namespace gpuinit;
using namespace gpuinit::testing;
using namespace std::literals;

[[noreturn]] void die(const std::string& message) {
    std::fprintf(stderr, "gpuinit-fuzz-seeds: %s\n", message.c_str());
    std::exit(1);
}

std::string read_file(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
        die("cannot open " + path + ": " + std::strerror(errno));
    }
    std::string text;
    char buffer[4096];
    for (;;) {
        ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            die("cannot read " + path + ": " + std::strerror(errno));
        }
        if (n == 0) {
            return text;
        }
        text.append(buffer, static_cast<size_t>(n));
    }
}

void write_file(const std::string& path, const std::string& text) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid() ||
        ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
        die("cannot write " + path + ": " + std::strerror(errno));
    }
}

// The seeds of every target, without duplicates.
class Corpus {
  public:
    void add(const std::string& target, std::string seed) {
        seeds_[target].insert(std::move(seed));
    }

    void write(const std::string& out) const {
        if (::mkdir(out.c_str(), 0755) != 0 && errno != EEXIST) {
            die("cannot create " + out + ": " + std::strerror(errno));
        }
        for (const auto& [target, seeds] : seeds_) {
            std::string dir = out + "/" + target;
            if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
                die("cannot create " + dir + ": " + std::strerror(errno));
            }
            size_t n = 0;
            for (const std::string& seed : seeds) {
                write_file(dir + format("/seed-%03zu", n++), seed);
            }
            std::printf("gpuinit-fuzz-seeds: %-16s %3zu seeds\n", target.c_str(), seeds.size());
        }
    }

  private:
    std::map<std::string, std::set<std::string>> seeds_;
};

std::string joined(std::initializer_list<std::string> parts) {
    std::string text;
    for (const std::string& part : parts) {
        text += text.empty() ? part : std::string(1, '\0') + part;
    }
    return text;
}

// The fixture machines: the workstation in several sizes and states.
std::vector<FakeMachine> machines() {
    std::vector<FakeMachine> all;
    for (unsigned gpus : {1u, 2u, 4u, 8u, 16u}) {
        all.push_back(workstation(gpus));
    }
    FakeMachine legacy = workstation(2);
    legacy.legacy_frontend = true;
    legacy.uvm_loaded = false;
    all.push_back(legacy);
    FakeMachine modeset = workstation(3);
    modeset.modeset_loaded = true;
    modeset.uvm_major = 4095;
    modeset.pci[1].excluded = true;
    modeset.pci[3].uuid.clear();
    modeset.pci[3].model = "Tesla V100-SXM2-32GB";
    modeset.users = {"alice", "bob", "svc-train"};
    modeset.groups.push_back("gpuusers");
    modeset.params = "ModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 44\n"
                     "DeviceFileMode: 438\nRegistryDwords: \"RMForceStaticBar1=1;RmMsg=\"\n"
                     "EnableMSI: 1\nExcludedGpus: \"GPU-558ce120\"\n";
    all.push_back(modeset);
    FakeMachine unloaded = workstation(1);
    unloaded.driver_loaded = false;
    all.push_back(unloaded);
    return all;
}

void add_fixture_files(Corpus& corpus) {
    TempDir scratch;
    size_t n = 0;
    for (const FakeMachine& machine : machines()) {
        std::string root = scratch / format("m%zu", n++);
        if (auto written = write_fixture(machine, root); !written) {
            die(written.error().text());
        }
        corpus.add("proc_devices", read_file(root + "/proc/devices"));
        corpus.add("proc_pci_devices", read_file(root + "/proc/bus/pci/devices"));
        if (machine.driver_loaded) {
            std::string params = read_file(root + "/proc/driver/nvidia/params");
            corpus.add("driver_params", params);
            corpus.add("kv_reader", params);
        }
        std::string passwd = read_file(root + "/etc/passwd");
        std::string group = read_file(root + "/etc/group");
        corpus.add("accounts", joined({passwd, group}));

        std::string policy = "# generated for a " + std::to_string(machine.groups.size()) +
                             "-GPU fixture\ncontrol=* group=root mode=0666\n";
        for (const FakePciFunction& function : machine.pci) {
            if (!function.minor) {
                continue;
            }
            std::string group_name = "nvidia" + std::to_string(*function.minor);
            if (machine.driver_loaded) {
                std::string information =
                    read_file(root + "/proc/driver/nvidia/gpus/" + function.bdf + "/information");
                corpus.add("gpu_information", information);
                corpus.add("kv_reader", information);
            }
            corpus.add("gpu_selector", function.bdf);
            corpus.add("gpu_selector", function.bdf.substr(5)); // domain left out
            corpus.add("gpu_selector", std::to_string(*function.minor));
            if (!function.uuid.empty()) {
                corpus.add("gpu_selector", function.uuid);
                policy += "gpu=" + function.uuid + " group=" + group_name + "\n";
            } else {
                policy += "gpu=" + function.bdf + "\tgroup=" + group_name + " mode=0660\n";
            }
            corpus.add("text_json", function.model);
        }
        corpus.add("policy", policy);
    }
}

void add_by_hand(Corpus& corpus, const std::string& source_dir) {
    for (const char* text : {
             "",
             "Character devices:\n",
             "Character devices:\n195 nvidia\n195 nvidiactl\n510 nvidia-uvm\n",
             "Character devices:\n  1 mem\n4095 big\n0 zero\n007 octal-looking\n",
             "Character devices:\r\n195 nvidia\r\n\r\nBlock devices:\r\n",
             "Character devices:\n\t195\tnvidia\n 4 /dev/vc/0\n 5 a:b.c_d\n",
             "Block devices:\n  8 sd\nCharacter devices:\n195 nvidia\n",
             "Character devices:\n195 nvidia\n\nCharacter devices:\n196 x\n",
             "Character devices:\n4096 too-big\n",
             "Character devices:\n195 two words\n",
             "Character devices:\n195 nvidia\x1b[31m\n",
             "Character devices:\n18446744073709551616 overflow\n",
         }) {
        corpus.add("proc_devices", text);
    }
    for (const char* text : {
             "0000\t80860d57\t0\t               0\t               0\t\n",
             "1700\t10de20b5\tb1\t        fb000000\t       38000000c\tnvidia\n"
             "1701\t10de1aef\tb2\t        fc080000\t               0\tsnd_hda_intel\n",
             "00ff\t10de20b5",
             "0000\t10de20b5\t0\n\n",
             "FFFF\tFFFFFFFF\t\n",
             "0000\t10de20b5\r\n",
         }) {
        corpus.add("proc_pci_devices", text);
    }
    for (const char* text : {
             "Device Minor: 0\n",
             "Device Minor: 253\nGPU UUID: GPU-0\nBus Location: 17:00.0\n",
             "Device Minor: 254\n",
             "Model: x\n",
             "Device Minor:\t3\nDevice Minor: 4\n",
             "Device Minor: 3\nGPU UUID: GPU-\n",
             "Device Minor: 3\nGPU UUID: 558ce120-5b8b\n",
             "Device Minor: 1\nGPU Excluded: Yes\nBus Location: ffffffff:ff:1f.7\n",
             "Model: NVIDIA \xe2\x80\xae PCIe\nDevice Minor: 2\n",
             "Model (full): a: b: c\nDevice Minor: 02\n",
             "\n\n   \nDevice Minor: 5\r\n",
         }) {
        corpus.add("gpu_information", text);
        corpus.add("kv_reader", text);
    }
    for (const char* text : {
             "ModifyDeviceFiles: 0\n",
             "DeviceFileMode: \"432\"\n",
             "DeviceFileMode: 0666\n",
             "DeviceFileUID: 18446744073709551615\nDeviceFileGID: 18446744073709551616\n",
             "RegistryDwords: \"\"\nRegistryDwordsPerDevice: \"a b; c\"\n",
             "RegistryDwords: \"unterminated\n",
             "Name With Space: 1\n",
             "ModifyDeviceFiles: 0\nModifyDeviceFiles: 1\n",
             "A.b-c_d: \"\"\"\n",
             "x: \"\x7f\"\n",
         }) {
        corpus.add("driver_params", text);
        corpus.add("kv_reader", text);
    }
    for (const char* text : {":", "a:", ":b", "a:b\nc", "a (b).c-d_e: :::\n", "k:\tv\t\n"}) {
        corpus.add("kv_reader", text);
    }

    corpus.add("accounts", joined({"root:x:0:0::/root:/bin/sh\n#comment:x:5:\n\n",
                                   "root:x:0:\nvideo:x:44:alice,bob\nvideo:x:45:\n"}));
    corpus.add("accounts", joined({"a:x:4294967294:1\nb:x:4294967295:1\n",
                                   "1000:x:1000:\n:x:1:\nspace name:x:2:\nnvidia0:x:07:\n"}));
    corpus.add("accounts", joined({"+::::::\n-@netgroup\nshort:x\n", "g:x:1\ng2::2:\r\n"}));
    corpus.add("accounts", joined({"x:x:1:1\n", "y:x:2:" + std::string(300, 'm') + "\n" +
                                                    std::string(257, 'l') + ":x:3:\n"}));

    std::string man_example = "# Two GPUs per research group\n"
                              "gpu=0000:17:00.0  group=vision\n"
                              "gpu=0000:27:00.0  group=vision\n"
                              "gpu=0000:37:00.0  group=nlp\n"
                              "gpu=0000:47:00.0  group=nlp\n\n"
                              "gpu=*             group=nvidia{minor} mode=0660\n"
                              "control=*         group=gpuusers mode=0660\n";
    corpus.add("policy", man_example);
    for (const char* text : {
             "",
             "gpu=0 group=a owner=alice mode=0600\ngpu=1 group=b\n",
             "gpu=GPU-558ce120-5b8b-16a1-87d4-ce157bba0000 group=x # by uuid\n"
             "gpu=gpu-558CE120 group=y\n",
             "gpu=17:00.0 group=a\ngpu=0000:17:00.0 group=b\n",
             "gpu=GPU-AB group=a\ngpu=GPU-ab group=b\n",
             "control=nvidiactl group=video mode=0660\ncontrol=nvidia-uvm group=video\n"
             "control=nvidia-uvm-tools group=root mode=0600\ncontrol=nvidia-modeset group=x\n",
             "gpu=* group={minor}\n",
             "gpu=* group=g{minor}{minor}\n",
             "control=* group=g{minor}\n",
             "gpu=3 mode=0999 group=a\n",
             "gpu=3 mode=660 group=a\n",
             "gpu=3 group=a group=b\n",
             "gpu=3 control=* group=a\n",
             "group=a\n",
             "gpu=254 group=a\n",
             "gpu= group=a\n",
             "gpu=3 group=a=b\n",
             "gpu=3 group=a,b\n",
             "gpu=3 colour=red group=a\n",
             "\tgpu=3\tgroup=a\r\n#\n   # only a comment\n",
         }) {
        corpus.add("policy", text);
    }
    for (const char* text : {"0",
                             "253",
                             "254",
                             "007",
                             "-1",
                             "+1",
                             " 3",
                             "17:00.0",
                             "0000:17:00.0",
                             "0:0:0.0",
                             "ffffffff:ff:1f.7",
                             "100000000:00:00.0",
                             "00:20.0",
                             "00:00.8",
                             "0000:0:0.0",
                             "0000:17:00.0.0",
                             "17:00",
                             "1.2:3",
                             "GPU-",
                             "GPU-0",
                             "gpu-abc",
                             "GPU-ABCDEF-0123456789abcdef",
                             "GPU-1 2",
                             "MIG-GPU-0/1/2",
                             "nvidia0",
                             "*"}) {
        corpus.add("gpu_selector", text);
    }

    std::string shipped = read_file(source_dir + "/modprobe.d/gpu-restriction.conf");
    for (std::string_view line : split_lines(shipped)) {
        if (line.starts_with("options ")) {
            auto words = split_words(line);
            std::string options;
            for (size_t i = 2; i < words.size(); ++i) {
                options += (options.empty() ? "" : " ") + std::string(words[i]);
            }
            corpus.add("module_options", options);
            corpus.add("module_options", joined({options, "NVreg_DeviceFileMode=0600"}));
        }
    }
    for (const std::string& text : {
             std::string("a=1 b=2"),
             joined({"a=1 b=2", "c=3", "a=9"}),
             std::string("s=\"x y\" flag"),
             joined({"NVreg_RegistryDwords=\"a=1;b=2\"", "NVreg_RegistryDwords=\"c=3\""}),
             joined({"", "", ""}),
             joined({"k=\"open", "NVreg_ModifyDeviceFiles=0"}),
             std::string("=1 == a= \"\" \"=\" x\t\ty\n\nz"),
             std::string("BOOT_IMAGE=/vmlinuz root=UUID=1 ro quiet nvidia.NVreg_Mode=1 "
                         "nvidia-drm.modeset=1 modprobe.blacklist=nouveau,nvidiafb,,"),
             std::string("modprobe.blacklist= .x=1 a.=2 x=a.b \"nvidia.a=1 b\" nvidia.s=\"p q\""),
         }) {
        corpus.add("module_options", text);
    }

    for (const std::string& text : {
             std::string(""),
             std::string("plain ASCII text"),
             std::string("tab\there, newline\nthere, cr\r, nul \0 end"sv),
             std::string("\x1b[31mred\x1b[0m \x7f \x9b"),
             std::string("C1 as UTF-8: \xc2\x80 \xc2\x9b \xc2\x9f, not C1: \xc2\xa0 \xc3\xa9"),
             std::string("\xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbd \xf4\x8f\xbf\xbf"),
             std::string(
                 "overlong \xc0\xaf \xe0\x80\xaf surrogate \xed\xa0\x80 big \xf4\x90\x80\x80"),
             std::string("truncated \xe2\x82 \xf0\x9f\x98 end \xe2"),
             std::string("quote ' and \" and \\ backslash"),
             std::string("0777"),
             std::string("18446744073709551615"),
             std::string("ffffffffffffffff"),
             std::string("1777777777777777777777"),
             std::string("key\0value\0\x01nested\0\x04open\0\x05"sv),
             std::string(100, 'x') + "\xe2\x82\xac" + std::string(100, 'y'),
         }) {
        corpus.add("text_json", text);
    }
}

// The persistence RPC target reads two chunk-size bytes, then a stream of
// records (RFC 5531 record marking) of XDR words, written out by hand here
// so that the seeds do not depend on the encoder under test.
std::string xdr(std::initializer_list<uint32_t> words) {
    std::string bytes;
    for (uint32_t word : words) {
        for (int shift = 24; shift >= 0; shift -= 8) {
            bytes += static_cast<char>(word >> shift);
        }
    }
    return bytes;
}

std::string rpc_fragment(const std::string& record, bool last = true) {
    return xdr({(last ? 0x80000000u : 0u) | static_cast<uint32_t>(record.size())}) + record;
}

void add_persistence_rpc(Corpus& corpus) {
    // nvidia-smi's AUTH_SYS credential: stamp, machine name, uid, gid, groups.
    std::string auth_sys =
        xdr({1, 36, 0x5eed, 9}) + "gpu-node7" + std::string(3, '\0') + xdr({1000, 1000, 1, 44});
    auto call = [](uint32_t xid, uint32_t version, uint32_t procedure, const std::string& cred,
                   std::initializer_list<uint32_t> args) {
        return xdr({xid, 0, 2, 35006, version, procedure}) + cred + xdr({0, 0}) + xdr(args);
    };
    std::string none = xdr({0, 0});
    std::string get = call(1, 1, 2, none, {0, 0x17, 0, 0});
    std::string set = call(2, 1, 1, auth_sys, {0, 0xb1, 0, 0, 1});
    std::vector<std::string> records = {
        get,
        set,
        call(3, 2, 1, none, {0, 0x17, 0, 0, 0}),
        call(4, 2, 2, auth_sys, {0, 0x17, 0, 0, 1}),
        call(5, 1, 0, none, {}),
        call(6, 2, 0, auth_sys, {}),
        call(7, 3, 2, none, {0, 0, 0, 0}),
        call(8, 1, 9, none, {}),
        call(11, 1, 1, auth_sys, {0, 0x17, 0, 1, 2}), // another function, a mode outside the enum
        call(12, 2, 2, none, {0, 0x17, 0, 0, 7}),
        xdr({13, 0, 2, 35006, 1, 2, 1, 8, 1, 300, 0, 0, 0, 0x17, 0, 0}), // AUTH_SYS cut short
        xdr({14, 0, 2, 35006, 1, 2, 6, 20, 1, 0, 0, 1, 0, 0, 0, 0, 0x17, 0, 0}), // RPCSEC_GSS
        xdr({9, 0, 3}),
        xdr({10, 0, 2, 100003, 3, 0, 0, 0, 0, 0}),
        xdr({1, 1, 0, 0, 0, 0, 0, 1}), // a get's reply: enabled
        xdr({2, 1, 0, 0, 0, 0, 7}),    // a set's reply: permissions
        xdr({7, 1, 0, 0, 0, 2, 1, 2}), // program version mismatch
        xdr({9, 1, 1, 0, 2, 2}),       // denied: RPC version mismatch
    };
    for (const std::string& record : records) {
        corpus.add("persistence_rpc", "\xff\xff" + rpc_fragment(record));
    }
    corpus.add("persistence_rpc", std::string("\0\x05", 2) + rpc_fragment(get) + rpc_fragment(set));
    corpus.add("persistence_rpc", "\x03\x40" + rpc_fragment(get.substr(0, 10), false) +
                                      rpc_fragment(get.substr(10, 30), false) +
                                      rpc_fragment(get.substr(40)) + rpc_fragment(""));
    corpus.add("persistence_rpc", std::string("\x01\x02", 2) + xdr({0x7fffffff}) + get);
}

// A request, a reply and a state file, joined with NULs.
void add_persist_control(Corpus& corpus) {
    std::string reply =
        "gpu-persist-reply 1\nresult\t0\t-\n"
        "daemon\t97\t990\tno\ton\tudev\n"
        "gpu\t0\t0000:17:00.0\tGPU-558ce120-5b8b-16a1-87d4-ce157bba3e9d\theld\tyes\t0\t-\n"
        "gpu\t1\t10000:00:01.0\t-\tfailed\tno\t5\tinit failed\nend\n";
    std::string state = "# gpu-persist\ndisabled GPU-558ce120-5b8b-16a1-87d4-ce157bba3e9d "
                        "0000:17:00.0\ndisabled - 10000:00:01.0\n";
    for (const char* request : {"status", "enable 0", "disable all", "enable 0000:17:00.0",
                                "disable GPU-558ce120-5b8b-16a1-87d4-ce157bba3e9d"}) {
        corpus.add("persist_control", std::string(request) + '\0' + reply + '\0' + state);
    }
}

// A file of a capture directory, or "" when that capture lacks it.
std::string capture_file(const std::filesystem::path& dir, const char* name) {
    std::error_code error;
    return std::filesystem::is_regular_file(dir / name, error) ? read_file(dir / name)
                                                               : std::string();
}

// The real outputs of tests/fixture/captures: nvidia-smi's four texts
// joined as fuzz_nvidia_smi cuts them, and the driver's /proc files.
void add_captures(Corpus& corpus, const std::string& source_dir) {
    std::filesystem::path captures = std::filesystem::path(source_dir) / "tests/fixture/captures";
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(captures, error)) {
        if (!entry.is_directory()) {
            continue;
        }
        const std::filesystem::path& dir = entry.path();
        std::string list = capture_file(dir, "L.txt");
        std::string lgi = capture_file(dir, "mig-lgi.txt");
        std::string lci = capture_file(dir, "mig-lci.txt");
        std::string xml = capture_file(dir, "q.xml");
        std::string lgipp = capture_file(dir, "mig-lgipp.txt");
        std::string lgip = capture_file(dir, "mig-lgip.txt");
        corpus.add("nvidia_smi", !lgip.empty()   ? joined({list, lgi, lci, xml, lgipp, lgip})
                                 : lgipp.empty() ? joined({list, lgi, lci, xml})
                                                 : joined({list, lgi, lci, xml, lgipp}));
        if (!list.empty()) {
            corpus.add("nvidia_smi", list);
        }
        std::string mixed = capture_file(dir, "mig-lgi-mixed.txt");
        if (!mixed.empty()) {
            corpus.add("nvidia_smi", joined({list, mixed}));
        }
        std::filesystem::path proc = dir / "proc";
        for (const auto& [target, file] : {std::pair{"proc_devices", "devices"},
                                           std::pair{"driver_params", "driver/nvidia/params"}}) {
            std::string text = capture_file(proc, file);
            if (!text.empty()) {
                corpus.add(target, text);
            }
        }
        // Not every capture has /proc files: a missing directory lists as empty.
        std::error_code no_gpus;
        for (const auto& gpu :
             std::filesystem::directory_iterator(proc / "driver/nvidia/gpus", no_gpus)) {
            std::string text = capture_file(gpu.path(), "information");
            if (!text.empty()) {
                corpus.add("gpu_information", text);
            }
        }
    }
    if (error) {
        die("cannot list " + captures.string() + ": " + error.message());
    }
}

// The MIG files: the fixture box's mig-minors and access files (joined as
// fuzz_mig_caps cuts them), the real capture's config and monitor, names
// files and gres.conf files as gpu-mig writes them and as admins do.
void add_mig(Corpus& corpus, const std::string& source_dir) {
    TempDir scratch;
    std::string root = scratch / "box";
    FakeMachine box = a100_mig_box();
    if (auto written = write_fixture(box, root); !written) {
        die(written.error().text());
    }
    std::string caps = root + "/proc/driver/nvidia/capabilities";
    std::string minors = read_file(root + "/proc/driver/nvidia-caps/mig-minors");
    std::string gi = read_file(caps + "/gpu1/mig/gi7/access");
    std::string ci = read_file(caps + "/gpu1/mig/gi7/ci0/access");
    corpus.add("mig_caps", joined({minors, gi, ci}));
    corpus.add("mig_caps", joined({"config 1\nmonitor 2\ngpu0/gi1/access 12\n", ci}));
    std::string capture = source_dir + "/tests/fixture/captures/h100-580.159.04/proc/driver/nvidia/"
                                       "capabilities/mig/";
    corpus.add("mig_caps", joined({"config 1\nmonitor 2\n", read_file(capture + "config"),
                                   read_file(capture + "monitor")}));

    std::string uuid = fake_uuid(1);
    corpus.add("mig_names_file", "# gpu-mig sync, from NVML\n" + uuid + " 7 0 1g.10gb MIG-" +
                                     uuid.substr(4) + "\n" + uuid + " 8 0 - -\n" + uuid +
                                     " 9 0 1c.3g.40gb -\n");
    corpus.add("mig_names_file", uuid + " 13 0 1g.10gb+me MIG-" + uuid.substr(4) + "\n");

    corpus.add("gres_conf", "AutoDetect=off\n"
                            "Name=gpu Type=nvidia_a100_1g.10gb MultipleFiles=/dev/nvidia1,"
                            "/dev/nvidia-caps/nvidia-cap66,/dev/nvidia-caps/nvidia-cap67\n"
                            "Name=gpu Type=a100 File=/dev/nvidia[0-3]\n");
    corpus.add("gres_conf", joined({"NodeName=gpu[01-10],login Name=gpu File=/dev/nvidia0 "
                                    "Cores=0-15\nNodeName=other Name=gpu File=/dev/nvidia1\n",
                                    "gpu03"}));
    corpus.add("gres_conf", "a100_1g.10gb site-small\n# a type map\n");
    corpus.add("policy", "mig-leases-per-user=4\ngpu=1 gi=7 group=vision\n");

    corpus.add("mig_layout", "# every GPU seven 1g.10gb\ngpu=* mig=on gi=1g.10gb*7\n"
                             "gpu=0 mig=off\ngpu=1 mig=on gi=3g.40gb/1c.3g.40gb*2\n");
    corpus.add("mig_layout", "model=NVIDIA_H100_80GB_HBM3 mig=on gi=3g.40gb/2c.3g.40gb,1c.3g.40gb "
                             "gi=2g.20gb gi=1g.10gb+me gi=1g.20gb\ngpu=0000:17:00.0\tmig=on\ngpu=" +
                                 uuid + " mig=on gi=7g.80gb\n");
    corpus.add("mig_layout", "gpu=2 mig=on gi=1g.24gb-me*4 gi=2g.48gb/1c.2g.48gb*2\n");
}

// nvidia-smi's outputs, -L, mig -lgi, mig -lci and -q -x joined with NULs
// (fuzz_nvidia_smi cuts them apart), for several layouts.
void add_nvidia_smi(Corpus& corpus) {
    auto all = [](const std::vector<SmiFakeGpu>& gpus) {
        return joined({smi_list(gpus), smi_lgi(gpus), smi_lci(gpus), smi_query_xml(gpus)});
    };
    std::vector<SmiFakeGpu> a100 = smi_a100_box([](unsigned minor) { return fake_uuid(minor); });
    corpus.add("nvidia_smi", all(a100));
    corpus.add("nvidia_smi", smi_list(a100));
    corpus.add("nvidia_smi", joined({smi_list(a100), "", "", smi_query_xml(a100)}));
    std::vector<SmiFakeGpu> renumbered = a100;
    for (SmiFakeGpu& gpu : renumbered) {
        gpu.index = 3 - gpu.minor;
        std::reverse(gpu.instances.begin(), gpu.instances.end());
    }
    corpus.add("nvidia_smi", all(renumbered));
    std::vector<SmiFakeGpu> mixed(a100.begin(), a100.begin() + 2);
    mixed[1].name = "NVIDIA H100 80GB HBM3";
    mixed[1].instances = {{1, 0, "3g.40gb", "2c.3g.40gb", 9, 1, 4, 4},
                          {1, 1, "3g.40gb", "1c.3g.40gb", 9, 0, 4, 4},
                          {13, 0, "1g.10gb+me", "1g.10gb+me", 20, 0, 1, 1}};
    corpus.add("nvidia_smi", all(mixed));
    // Blackwell's profiles (RTX PRO 6000), and a -lci that names the CI of a
    // +me GI without the +me, as nvidia-smi does.
    std::vector<SmiFakeGpu> blackwell(a100.begin(), a100.begin() + 2);
    blackwell[1].name = "NVIDIA RTX PRO 6000 Blackwell Server Edition";
    blackwell[1].instances = {{3, 0, "1g.24gb-me", "1g.24gb-me", 67, 0, 0, 3},
                              {4, 0, "1g.24gb+me.all", "1g.24gb+me.all", 65, 0, 3, 3},
                              {1, 0, "2g.48gb+gfx", "2g.48gb+gfx", 35, 1, 6, 6}};
    corpus.add("nvidia_smi", all(blackwell));
    std::vector<SmiFakeGpu> media(a100.begin(), a100.begin() + 2);
    media[1].instances = {{13, 0, "1g.10gb+me", "1g.10gb", 20, 0, 1, 1}};
    corpus.add("nvidia_smi", all(media));
    std::vector<SmiFakeGpu> none(a100.begin(), a100.begin() + 1);
    corpus.add("nvidia_smi", all(none));
    std::string gpu0 = "GPU 0: NVIDIA A100 80GB PCIe (UUID: " + fake_uuid(0) + ")\n";
    for (const std::string& text : {
             gpu0 + "  MIG 1g.10gb Device  0: (UUID: MIG-" + fake_uuid(0) + "/7/0)\n",
             gpu0 + gpu0,
             std::string("No devices found.\n"),
             joined({gpu0, "No MIG-enabled devices found.\n", "No MIG-enabled devices found.\n"}),
             std::string("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                         "driver.\n"),
             joined({gpu0, "Insufficient Permissions\n", "Insufficient Permissions\n",
                     "<nvidia_smi_log>\n<gpu id=\"x\">\n<uuid>GPU-</uuid>\n"}),
             joined({gpu0, "|  0 MIG 1g.10gb 19 15 0:1 |\n", "|  0 7 MIG 1c.3g.40gb 0 8 0:1 |\n",
                     "<nvidia_smi_log>\n\t<gpu>\n\t\t<mig_devices>\n\t\t\t<mig_device/>\n"
                     "\t\t</mig_devices>\n\t</gpu>\n</nvidia_smi_log>\n"}),
         }) {
        corpus.add("nvidia_smi", text);
    }
}

// The eGPU variables as containers and gpu-limit run set them.
void add_egpu_settings(Corpus& corpus) {
    const std::vector<std::vector<std::string>> environments = {
        {"GPU_MEM_PER_DEVICE=4294967296"},
        {"GPU_MEM_PER_DEVICE=2147483648", "ALIYUN_COM_GPU_MEM_RESERVED=0"},
        {"ALIYUN_COM_GPU_MEM_DEV=16", "ALIYUN_COM_GPU_MEM_CONTAINER=4"},
        {"ALIYUN_COM_GPU_MEM_CONTAINER=8", "ALIYUN_COM_GPU_MEM_RESERVED=64"},
        {"GPU_MEM_PER_DEVICE=1073741824",
         "NVIDIA_VISIBLE_DEVICES=GPU-28df1ae3-0b0a-4a0b-9d3e-7c4b8e1f2a3b,3"},
        {"GPU_MEM_PER_DEVICE=1073741824", "NVIDIA_VISIBLE_DEVICES=none"},
        {"GPU_MEM_PER_DEVICE=1073741824", "ALIYUN_COM_GPU_OOM_SCRIPT=/usr/bin/notify",
         "GPU_LIMIT_OOM_POLICY=kill", "GPU_LIMIT_OOM_SCRIPT_TIMEOUT=5"},
        {"GPU_MEM_PER_DEVICE=1073741824", "GPU_LIMIT_GROUP=slurm-4242",
         "GPU_LIMIT_STATE_DIR=/run/gpu-limit"},
        {"AMP_VGPU_ENABLE=0", "GPU_MEM_PER_DEVICE=x"},
        {"GPU_MEM_PER_DEVICE=18446744073709551616"},
        {"ALIYUN_COM_GPU_MEM_DEV=4", "ALIYUN_COM_GPU_MEM_CONTAINER=8"},
        {"NVIDIA_VISIBLE_DEVICES=MIG-GPU-28df1ae3/1/0"},
    };
    for (const std::vector<std::string>& environment : environments) {
        std::string text;
        for (const std::string& variable : environment) {
            text += text.empty() ? variable : std::string(1, '\0') + variable;
        }
        corpus.add("egpu_settings", text);
    }
}

// OCI configs and states as docker, podman and runc write them, the files
// of oci/, the edit's own output, and what the strict parser must refuse.
void add_json_value(Corpus& corpus, const std::string& source_dir) {
    const std::string spec_head =
        R"({"ociVersion":"1.0.2-dev","process":{"terminal":false,"user":{"uid":1000,"gid":100},)"
        R"("args":["sh"],"env":["PATH=/usr/bin:/bin",)";
    const std::string spec_tail =
        R"(],"cwd":"/"},"root":{"path":"rootfs","readonly":true},"hostname":"runc",)"
        R"("mounts":[{"destination":"/proc","type":"proc","source":"proc"},)"
        R"({"destination":"/dev","type":"tmpfs","source":"tmpfs","options":["nosuid","mode=755"]}],)"
        R"("linux":{"cgroupsPath":"/libpod_parent/libpod-)" +
        std::string(64, 'a') +
        R"(","uidMappings":[{"containerID":0,"hostID":100000,"size":65536}],)"
        R"("gidMappings":[{"containerID":0,"hostID":100000,"size":65536}],)"
        R"("namespaces":[{"type":"pid"},{"type":"mount"}],"resources":{"memory":{"limit":1e9}}}})";
    for (const std::string& env : {
             std::string(R"("AMP_VGPU_ENABLE=1","GPU_MEM_PER_DEVICE=4294967296")"),
             std::string(R"("AMP_VGPU_ENABLE=0")"),
             std::string(R"("GPU_LIMIT_GROUP=mine","AMP_VGPU_ENABLE=1","GPU_LIMIT_GROUP=x")"),
             std::string(R"("AMP_VGPU_ENABLE=1","GPU_LIMIT_STATE_DIR=/tmp")"),
         }) {
        corpus.add("json_value", spec_head + env + spec_tail);
    }
    // Already edited, then a mount that covers ours, and one that covers a parent.
    const std::string edited =
        R"({"process":{"env":["AMP_VGPU_ENABLE=1","GPU_LIMIT_STATE_DIR=/run/gpu-limit",)"
        R"("GPU_LIMIT_GROUP=ctr-1"]},"mounts":[{"destination":"/usr/lib/gpuinit/libgpulimit.so",)"
        R"("type":"bind","source":"/usr/lib/gpuinit/libgpulimit.so","options":["bind","ro"]},)"
        R"({"destination":"/etc/ld.so.preload","type":"bind","source":"/run/gpu-limit/ld.so.preload"},)"
        R"({"destination":"/run/gpu-limit/ctr-1","type":"bind","source":"/run/gpu-limit/ctr-1"})";
    corpus.add("json_value",
               edited + R"(],"annotations":{"org.gpuinit.gpu-limit.group":"ctr-1"}})");
    corpus.add("json_value", edited + R"(,{"destination":"/etc/ld.so.preload","type":"tmpfs"}]})");
    corpus.add("json_value", edited + R"(,{"destination":"/etc","type":"tmpfs","source":"t"}]})");
    corpus.add("json_value", edited + R"(,{"destination":"/etc//ld.so.preload/","type":"bind"}]})");
    // States, as runc, crun and podman hand them to hooks (podman: the
    // annotations its user wrote, naming another container's group).
    for (const std::string& state : {
             std::string(R"({"ociVersion":"1.0.2","id":"gl-on-1","status":"stopped","pid":0,)"
                         R"("bundle":"/b","annotations":{"org.gpuinit.gpu-limit.group":)"
                         R"("oci-0123456789abcdef"}})"),
             R"({"ociVersion":"1.0.0","id":")" + std::string(64, 'f') +
                 R"(","status":"stopped","pid":0,"bundle":"/b"})",
             R"({"ociVersion":"1.0.2","id":")" + std::string(64, 'a') +
                 R"(","status":"stopped","bundle":"/var/lib/containers/storage/overlay-)"
                 R"(containers/a/userdata","annotations":{"io.kubernetes.cri-o.ContainerID":")" +
                 std::string(64, 'b') + R"(","io.container.manager":"libpod"}})",
             std::string(R"({"id":"../etc","status":"stopped"})"),
             std::string(R"({"annotations":{"id":"x"},"status":"stopped"})"),
         }) {
        corpus.add("json_value", state);
        corpus.add("oci_state", state);
    }
    for (const char* file :
         {"/oci/docker-daemon.json.in", "/oci/hooks.d/gpu-limit-precreate.json.in",
          "/oci/hooks.d/gpu-limit-poststop.json.in"}) {
        corpus.add("json_value", read_file(source_dir + file));
    }
    for (const char* text : {
             "",
             "null",
             " true ",
             "false",
             "0",
             "-0.5e+10",
             "1E400",
             "[]",
             "{}",
             R"("\u00e9\ud83d\ude00\/\b\f\n\r\t\"\\")",
             R"("\u0000\u001f\u007f\u0085")",
             "\"\xc3\xa9\xf0\x9f\x98\x80\"",
             R"({"a":1,"a":2})",
             R"({"a":{"b":1,"b":2}})",
             R"("\ud800")",
             R"("\udc00x")",
             "\"\xed\xa0\x80\"",
             "\"\xc0\xaf\"",
             "01",
             "1.",
             "[1,]",
             "{\"a\":1,}",
             "\xef\xbb\xbf{}",
             "[1] x",
             "\"a\tb\"",
         }) {
        corpus.add("json_value", text);
    }
    for (size_t depth : {size_t{64}, size_t{65}}) { // the parser's limit, and one over it
        corpus.add("json_value", std::string(depth, '[') + std::string(depth, ']'));
    }
}

// The registration datagram of gpu-limit daemon's socket, both versions, and
// near misses.
void add_daemon_registration(Corpus& corpus) {
    for (const char* text :
         {"GPULIMIT2 REGISTER job1 0\n", "GPULIMIT2 REGISTER slurm-4242.0 1023\n",
          "GPULIMIT2 REGISTER 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef 7\n",
          "GPULIMIT1 REGISTER job1 3\n", "GPULIMIT2 REGISTER .. 1\n", "GPULIMIT2 REGISTER job 01\n",
          "GPULIMIT2 REGISTER job 1024\n", "GPULIMIT2 REGISTER job 1"}) {
        corpus.add("daemon_registration", text);
    }
}

// /proc/<pid>/stat lines (comm with spaces and parentheses), and fdinfo
// texts with the lock lines the kernel writes, behind the 8-byte offset
// the fdinfo target reads first.
void add_proc_pid(Corpus& corpus) {
    const std::string fields = " S 1 4242 4242 0 -1 4194560 1000 0 0 0 12 3 0 0 20 0 1 0 987654 "
                               "12345678 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3\n";
    for (const char* comm : {"(bash)", "(a b)", "((x) y))", "(", "()"}) {
        corpus.add("proc_stat", "4242 " + std::string(comm) + fields);
    }
    corpus.add("proc_stat", "4242 (x) S 1");
    auto fdinfo = [&](uint64_t offset, const std::string& text) {
        std::string bytes(8, '\0');
        std::memcpy(bytes.data(), &offset, sizeof offset);
        corpus.add("fdinfo", bytes + text);
    };
    fdinfo(1000, "pos:\t0\nflags:\t02100002\nmnt_id:\t27\nino:\t77\n"
                 "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:01:77 1000 1000\n");
    fdinfo(5, "pos:\t0\nflags:\t02\nlock:\t1: OFDLCK ADVISORY  READ -1 fe:01:77 0 EOF\n"
              "lock:\t2: POSIX  ADVISORY  WRITE 42 fe:01:77 5 5\n");
    fdinfo(1ULL << 41, "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:01:77 0 EOF\n");
    fdinfo(0, "pos:\t0\nflags:\t02\nmnt_id:\t1\n");
    // Not the kernel's form (%lu prints no leading zero): not inode 77.
    fdinfo(0, "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:01:0077 0 EOF\n");
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fputs("usage: gpuinit-fuzz-seeds SOURCE_DIR OUT_DIR\n", stderr);
        return 1;
    }
    Corpus corpus;
    add_fixture_files(corpus);
    add_by_hand(corpus, argv[1]);
    add_persistence_rpc(corpus);
    add_persist_control(corpus);
    add_nvidia_smi(corpus);
    add_mig(corpus, argv[1]);
    add_captures(corpus, argv[1]);
    add_egpu_settings(corpus);
    add_json_value(corpus, argv[1]);
    add_daemon_registration(corpus);
    add_proc_pid(corpus);
    corpus.write(argv[2]);
    return 0;
}
