// The three ways a program reaches the driver, through libgpulimit.so
// (LD_PRELOAD) over the stand-in driver (LD_LIBRARY_PATH), checked from
// inside one process:
//
//   resolve_probe direct    the program's own cuMemAlloc_v2 binds to ours,
//                           and a call reaches the stand-in's
//   resolve_probe dlsym     dlsym on libcuda's and NVML's handles: ours for
//                           hooked names (switch on), glibc's answer for
//                           everything else; another library's handle is
//                           never touched
//   resolve_probe next      RTLD_NEXT from a library loaded after ours, and
//                           RTLD_DEFAULT, answer as without us
//   resolve_probe getproc   cuGetProcAddress and _v2 for CUDA 11.0, 11.8,
//                           12.4, 13.0 and 13.1 requests, default and
//                           per-thread flags, asked directly, through dlsym's
//                           answer and through cuGetProcAddress's own answer
//                           for itself: the same answer as the stand-in gives
//                           without the interposer (a child run without
//                           LD_PRELOAD), but for our wrapper of exactly that
//                           variant; a call through it reaches that variant
//
// With GPULIMIT_STANDIN_INTERNAL_PROCS=1 the stand-in answers internal
// pointers instead of its exports: then a hooked variant must come back as a
// wrapper hooked by name (libgpulimit's, not its export) that reaches the
// variant, and a request beyond the library's table (13.1) for a hooked
// symbol must be refused (CUDA_ERROR_NOT_FOUND, SYMBOL_NOT_FOUND).
//
// The switch is AMP_VGPU_ENABLE as the library reads it: "1" expects
// replacement, anything else none. GPULIMIT_PROBE_INTERPOSER names the
// preloaded library (the plain or the sanitized one). Exit status 0 when
// every check holds; one "FAIL:" line per broken one.
#include "cuda_abi.hpp"
#include "standin_control.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unistd.h>
#include <vector>

extern "C" {
CUresult cuInit(unsigned int flags);
CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus);
void* resolve_next_lookup(const char* name);
void* resolve_default_lookup(const char* name);
}

namespace {

int g_failures = 0;

void fail(const std::string& what) {
    std::printf("FAIL: %s\n", what.c_str());
    ++g_failures;
}

void expect(bool condition, const std::string& what) {
    if (!condition) {
        fail(what);
    }
}

bool switch_on() {
    const char* value = std::getenv("AMP_VGPU_ENABLE");
    return value != nullptr && std::strcmp(value, "1") == 0;
}

std::string real_path(const char* path) {
    char resolved[PATH_MAX];
    return path != nullptr && realpath(path, resolved) != nullptr ? resolved : "";
}

// Where an address lies: which of the libraries we know, and under which
// exported name.
struct Place {
    std::string object; // gpulimit, cuda, nvml, next, impostor, null, or a path
    std::string symbol;
    std::string text() const { return object + ":" + symbol; }
};

Place place_of(const void* address) {
    if (address == nullptr) {
        return {"null", ""};
    }
    Dl_info info{};
    if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) {
        return {"unknown", ""};
    }
    static const std::map<std::string, std::string> known = {
        {real_path(std::getenv("GPULIMIT_PROBE_INTERPOSER")), "gpulimit"},
        {real_path(GPULIMIT_STANDIN_DIR "/libcuda.so.1"), "cuda"},
        {real_path(GPULIMIT_STANDIN_DIR "/libnvidia-ml.so.1"), "nvml"},
        {real_path(RESOLVE_NEXT_LIBRARY), "next"},
        {real_path(RESOLVE_IMPOSTOR_LIBRARY), "impostor"},
    };
    const auto found = known.find(real_path(info.dli_fname));
    Place place{found != known.end() ? found->second : info.dli_fname,
                info.dli_sname != nullptr ? info.dli_sname : "?"};
    // dladdr names the nearest symbol: only an exact start is "that function".
    if (info.dli_saddr != address) {
        place.symbol += "+offset";
    }
    return place;
}

// Every hooked CUDA name, and the NVML ones, from the library's own list.
const std::vector<std::string> kCudaHooks = {
#define GPULIMIT_CUDA_HOOK(name, params, args) #name,
#include "entry_points.def"
};
const std::vector<std::string> kNvmlHooks = {
#define GPULIMIT_NVML_HOOK(name, params) #name,
#include "entry_points.def"
};

bool is_cuda_hook(const std::string& name) {
    for (const std::string& hook : kCudaHooks) {
        if (hook == name) {
            return true;
        }
    }
    return false;
}

void* open_library(const char* name) {
    void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        std::printf("FAIL: dlopen(%s): %s\n", name, dlerror());
        std::exit(1);
    }
    return handle;
}

// A current context on device 0 (the stand-in allocates only with one).
void create_context() {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    const auto create = reinterpret_cast<CUresult (*)(CUcontext*, unsigned, CUdevice)>(
        cuda != nullptr ? dlsym(cuda, "cuCtxCreate_v2") : nullptr);
    CUcontext context = nullptr;
    expect(create != nullptr && create(&context, 0, 0) == CUDA_SUCCESS, "cuCtxCreate_v2");
}

// ---- direct binding ----------------------------------------------------------

int run_direct() {
    const Place bound = place_of(reinterpret_cast<void*>(&cuMemAlloc_v2));
    expect(bound.object == "gpulimit" && bound.symbol == "cuMemAlloc_v2",
           "the program's cuMemAlloc_v2 binds to " + bound.text() + ", not libgpulimit.so's");
    expect(cuInit(0) == CUDA_SUCCESS, "cuInit(0)");
    create_context();
    gpulimit_standin_reset_calls();
    CUdeviceptr pointer = 0;
    const CUresult result = cuMemAlloc_v2(&pointer, 1 << 20);
    expect(result == CUDA_SUCCESS && pointer != 0,
           "cuMemAlloc_v2 through the interposer: " + std::to_string(result));
    expect(gpulimit_standin_calls("cuMemAlloc_v2") == 1,
           "the stand-in's cuMemAlloc_v2 ran " +
               std::to_string(gpulimit_standin_calls("cuMemAlloc_v2")) + " times, not once");
    expect(cuMemFree_v2(pointer) == CUDA_SUCCESS, "cuMemFree_v2");
    expect(gpulimit_standin_calls("cuMemFree_v2") == 1, "the stand-in's cuMemFree_v2 ran once");
    return g_failures == 0 ? 0 : 1;
}

// ---- dlsym on handles ------------------------------------------------------------

void check_handle(void* handle, const char* library_label, const std::vector<std::string>& hooks,
                  const std::vector<std::string>& others) {
    const bool on = switch_on();
    for (const std::string& name : hooks) {
        void* const address = dlsym(handle, name.c_str());
        const Place place = place_of(address);
        if (address == nullptr) {
            // The stand-in lacks it: then we must not invent it either.
            continue;
        }
        const std::string want = on ? "gpulimit" : library_label;
        expect(place.object == want && place.symbol == name,
               "dlsym(" + std::string(library_label) + ", " + name + ") = " + place.text() +
                   ", want " + want + ":" + name);
    }
    for (const std::string& name : others) {
        const Place place = place_of(dlsym(handle, name.c_str()));
        expect(place.object == library_label && place.symbol == name,
               "dlsym(" + std::string(library_label) + ", " + name + ") = " + place.text() +
                   ", want the driver's own");
    }
}

int run_dlsym() {
    void* cuda = open_library("libcuda.so.1");
    check_handle(cuda, "cuda", kCudaHooks,
                 {"cuDeviceGetCount", "cuCtxCreate_v2", GPULIMIT_STANDIN_CALLS});
    // Every hook the stand-in has must have been found at all.
    int found = 0;
    for (const std::string& name : kCudaHooks) {
        found += dlsym(cuda, name.c_str()) != nullptr ? 1 : 0;
    }
    expect(found + 2 >= static_cast<int>(kCudaHooks.size()),
           "the stand-in lacks most hooked names: " + std::to_string(found));
    // A name nobody has: null and glibc's error message, as without us.
    (void)dlerror();
    expect(dlsym(cuda, "cuNoSuchFunction") == nullptr, "dlsym(cuda, cuNoSuchFunction) not null");
    const char* error = dlerror();
    expect(error != nullptr && std::strstr(error, "cuNoSuchFunction") != nullptr,
           "dlerror() after a missing name: " + std::string(error != nullptr ? error : "(null)"));
    // NVML names on libcuda's handle are libcuda's business (it has none).
    expect(dlsym(cuda, "nvmlDeviceGetMemoryInfo") == nullptr,
           "dlsym(cuda, nvmlDeviceGetMemoryInfo) answered");

#ifdef RESOLVE_HAVE_NVML
    void* nvml = open_library("libnvidia-ml.so.1");
    check_handle(nvml, "nvml", kNvmlHooks, {"nvmlDeviceGetUUID", "nvmlInit_v2"});
    expect(dlsym(nvml, "cuMemAlloc_v2") == nullptr, "dlsym(nvml, cuMemAlloc_v2) answered");
#endif

    // Another library, named like the driver, defining a hooked name.
    void* impostor = open_library(RESOLVE_IMPOSTOR_LIBRARY);
    const Place other = place_of(dlsym(impostor, "cuMemAlloc_v2"));
    expect(other.object == "impostor" && other.symbol == "cuMemAlloc_v2",
           "dlsym(impostor, cuMemAlloc_v2) = " + other.text());
    void* next = open_library(RESOLVE_NEXT_LIBRARY);
    const Place next_own = place_of(dlsym(next, "cuMemAlloc_v2"));
    expect(next_own.object == "next", "dlsym(next library, cuMemAlloc_v2) = " + next_own.text());
    return g_failures == 0 ? 0 : 1;
}

// ---- RTLD_NEXT and RTLD_DEFAULT ----------------------------------------------------

int run_next() {
    // From the third library: the driver's, not its own and not ours.
    const Place from_next = place_of(resolve_next_lookup("cuMemAlloc_v2"));
    expect(from_next.object == "cuda" && from_next.symbol == "cuMemAlloc_v2",
           "RTLD_NEXT from the next library: " + from_next.text() + ", want cuda:cuMemAlloc_v2");
    // From the program: the first object after it is the preloaded one.
    const Place from_main = place_of(dlsym(RTLD_NEXT, "cuMemAlloc_v2"));
    expect(from_main.object == "gpulimit" && from_main.symbol == "cuMemAlloc_v2",
           "RTLD_NEXT from the program: " + from_main.text() + ", want gpulimit:cuMemAlloc_v2");
    // RTLD_DEFAULT: what the dynamic linker bound (ours, preloaded), from
    // anywhere; a name only the driver has is the driver's.
    void* const bound = reinterpret_cast<void*>(&cuMemAlloc_v2);
    expect(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") == bound, "RTLD_DEFAULT from the program");
    expect(resolve_default_lookup("cuMemAlloc_v2") == bound, "RTLD_DEFAULT from the next library");
    const Place calls = place_of(dlsym(RTLD_DEFAULT, GPULIMIT_STANDIN_CALLS));
    expect(calls.object == "cuda", "RTLD_DEFAULT for a driver-only name: " + calls.text());
    expect(resolve_next_lookup("getpid") == dlsym(RTLD_DEFAULT, "getpid"),
           "RTLD_NEXT for getpid is not libc's");
    return g_failures == 0 ? 0 : 1;
}

// ---- cuGetProcAddress --------------------------------------------------------------

const int kVersions[] = {11000, 11080, 12040, 13000, 13010};
// The newest version libgpulimit's table of variants knows (entries.hpp).
constexpr int kKnownVersion = 13000;

bool internal_procs() {
    const char* value = std::getenv("GPULIMIT_STANDIN_INTERNAL_PROCS");
    return value != nullptr && std::strcmp(value, "1") == 0;
}

// The stand-in's ABI name for an export of it or an internal pointer it gave.
std::string abi_of(const void* function) {
    const char* name = gpulimit_standin_proc_name(function);
    return name != nullptr ? name : "";
}
const cuuint64_t kFlags[] = {CU_GET_PROC_ADDRESS_DEFAULT,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};

// Names a program asks for: cuda.h's unversioned names (the hooks without
// _v2/_ptsz suffixes), the exported names themselves, names we do not hook
// and one nobody has.
std::vector<std::string> requested_names() {
    std::set<std::string> names;
    for (std::string name : kCudaHooks) {
        names.insert(name);
        for (const char* suffix : {"_ptsz", "_ptds"}) {
            const size_t length = std::strlen(suffix);
            if (name.size() > length && name.compare(name.size() - length, length, suffix) == 0) {
                name.resize(name.size() - length);
            }
        }
        const size_t v = name.rfind("_v");
        if (v != std::string::npos && v + 2 < name.size() &&
            name.find_first_not_of("0123456789", v + 2) == std::string::npos) {
            name.resize(v);
        }
        names.insert(name);
    }
    for (const char* other : {"cuDeviceGetCount", "cuCtxCreate", "cuStreamSynchronize",
                              "cuLaunchKernel", "cuNoSuchFunction"}) {
        names.insert(other);
    }
    return {names.begin(), names.end()};
}

struct Request {
    int api; // 1: cuGetProcAddress, 2: cuGetProcAddress_v2
    std::string name;
    int version;
    unsigned long long flags;
    bool operator<(const Request& other) const {
        return std::tie(api, name, version, flags) <
               std::tie(other.api, other.name, other.version, other.flags);
    }
};

struct Answer {
    int result = -1;
    int status = -1; // -1: not written (or api 1)
    Place place;
    std::string abi; // the stand-in's name for it ("" for anything else)
    void* address = nullptr;
};

using GetProc1 = CUresult (*)(const char*, void**, int, cuuint64_t);
using GetProc2 = CUresult (*)(const char*, void**, int, cuuint64_t,
                              CUdriverProcAddressQueryResult*);

std::map<Request, Answer> ask_all(GetProc1 get1, GetProc2 get2) {
    std::map<Request, Answer> answers;
    for (const std::string& name : requested_names()) {
        for (const int version : kVersions) {
            for (const cuuint64_t flags : kFlags) {
                for (const int api : {1, 2}) {
                    Answer answer;
                    void* pointer = reinterpret_cast<void*>(0x1); // must be overwritten
                    CUdriverProcAddressQueryResult status = -1;
                    answer.result = api == 1
                                        ? get1(name.c_str(), &pointer, version, flags)
                                        : get2(name.c_str(), &pointer, version, flags, &status);
                    answer.status = status;
                    answer.address = pointer;
                    answer.place = place_of(pointer);
                    answer.abi = abi_of(pointer);
                    answers[{api, name, version, flags}] = answer;
                }
            }
        }
    }
    return answers;
}

std::string describe(const Request& request) {
    return std::string(request.api == 1 ? "cuGetProcAddress" : "cuGetProcAddress_v2") + "(" +
           request.name + ", " + std::to_string(request.version) + ", " +
           std::to_string(request.flags) + ")";
}

int run_getproc_baseline() {
    // No LD_PRELOAD here: these are the stand-in's own answers.
    for (const auto& [request, answer] : ask_all(&cuGetProcAddress, &cuGetProcAddress_v2)) {
        std::printf("%d %s %d %llu %d %d %s %s %s\n", request.api, request.name.c_str(),
                    request.version, request.flags, answer.result, answer.status,
                    answer.place.object.c_str(),
                    answer.place.symbol.empty() ? "-" : answer.place.symbol.c_str(),
                    answer.abi.empty() ? "-" : answer.abi.c_str());
    }
    return 0;
}

std::map<Request, Answer> baseline_from_child() {
    char self[PATH_MAX] = {};
    if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) {
        fail("readlink /proc/self/exe");
        return {};
    }
    const std::string command =
        std::string("env -u LD_PRELOAD -u AMP_VGPU_ENABLE '") + self + "' getproc-baseline";
    FILE* child = popen(command.c_str(), "r");
    if (child == nullptr) {
        fail("popen " + command);
        return {};
    }
    std::map<Request, Answer> answers;
    char name[256];
    char object[PATH_MAX];
    char symbol[256];
    char abi[256];
    Request request;
    Answer answer;
    while (std::fscanf(child, "%d %255s %d %llu %d %d %4095s %255s %255s", &request.api, name,
                       &request.version, &request.flags, &answer.result, &answer.status, object,
                       symbol, abi) == 9) {
        request.name = name;
        answer.place = {object, std::strcmp(symbol, "-") == 0 ? "" : symbol};
        answer.abi = std::strcmp(abi, "-") == 0 ? "" : abi;
        answers[request] = answer;
    }
    expect(pclose(child) == 0, "the baseline run failed");
    return answers;
}

// The stand-in variants a pointer may be called as (with an injected
// failure, so nothing happens but the counting), and their siblings that
// must not be reached instead.
struct Callable {
    const char* abi_name;
    const char* sibling;
    CUresult (*call)(void* function);
};

CUdeviceptr g_out = 0;
const Callable kCallables[] = {
    {"cuMemAllocAsync", "cuMemAllocAsync_ptsz",
     [](void* f) {
         return reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t, CUstream)>(f)(&g_out, 1 << 20,
                                                                                  nullptr);
     }},
    {"cuMemAllocAsync_ptsz", "cuMemAllocAsync",
     [](void* f) {
         return reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t, CUstream)>(f)(&g_out, 1 << 20,
                                                                                  nullptr);
     }},
    {"cuMemFreeAsync", "cuMemFreeAsync_ptsz",
     [](void* f) {
         return reinterpret_cast<CUresult (*)(CUdeviceptr, CUstream)>(f)(0x1000, nullptr);
     }},
    {"cuMemFreeAsync_ptsz", "cuMemFreeAsync",
     [](void* f) {
         return reinterpret_cast<CUresult (*)(CUdeviceptr, CUstream)>(f)(0x1000, nullptr);
     }},
    {"cuGraphLaunch", "cuGraphLaunch_ptsz",
     [](void* f) {
         return reinterpret_cast<CUresult (*)(CUgraphExec, CUstream)>(f)(nullptr, nullptr);
     }},
    {"cuGraphLaunch_ptsz", "cuGraphLaunch",
     [](void* f) {
         return reinterpret_cast<CUresult (*)(CUgraphExec, CUstream)>(f)(nullptr, nullptr);
     }},
    {"cuMemAlloc_v2", "cuMemAlloc",
     [](void* f) {
         return reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(f)(&g_out, 1 << 20);
     }},
    {"cuLaunchKernel", "cuLaunchKernel_ptsz",
     [](void* f) {
         return reinterpret_cast<CUresult (*)(
             CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
             CUstream, void**, void**)>(f)(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
     }},
    {"cuLaunchKernel_ptsz", "cuLaunchKernel",
     [](void* f) {
         return reinterpret_cast<CUresult (*)(
             CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
             CUstream, void**, void**)>(f)(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
     }},
};
constexpr CUresult kInjected = 987;

// `abi`: the variant the stand-in answered the request with.
void check_call(const Request& request, const std::string& abi, const Answer& answer) {
    for (const Callable& callable : kCallables) {
        if (abi != callable.abi_name) {
            continue;
        }
        const unsigned long long before = gpulimit_standin_calls(callable.abi_name);
        const unsigned long long sibling_before = gpulimit_standin_calls(callable.sibling);
        gpulimit_standin_fail_next(callable.abi_name, kInjected);
        const CUresult result = callable.call(answer.address);
        const unsigned long long calls = gpulimit_standin_calls(callable.abi_name) - before;
        const unsigned long long sibling =
            gpulimit_standin_calls(callable.sibling) - sibling_before;
        expect(result == kInjected && calls == 1 && sibling == 0,
               describe(request) + " -> " + answer.place.text() + ": a call returned " +
                   std::to_string(result) + " and reached the stand-in's " + callable.abi_name +
                   " " + std::to_string(calls) + " times, " + callable.sibling + " " +
                   std::to_string(sibling) + " times");
        gpulimit_standin_fail_next(callable.abi_name, 0); // disarm if the call never came
        (void)gpulimit_standin_calls(callable.abi_name);
    }
}

int run_getproc() {
    const bool on = switch_on();
    const bool internal = internal_procs();
    const std::map<Request, Answer> baseline = baseline_from_child();
    expect(!baseline.empty(), "no baseline answers");

    void* cuda = open_library("libcuda.so.1");
    // The lookup functions themselves, as a program finds them.
    const auto via_dlsym1 = reinterpret_cast<GetProc1>(dlsym(cuda, "cuGetProcAddress"));
    const auto via_dlsym2 = reinterpret_cast<GetProc2>(dlsym(cuda, "cuGetProcAddress_v2"));
    const std::string want_lookup = on ? "gpulimit" : "cuda";
    expect(place_of(reinterpret_cast<void*>(via_dlsym2)).object == want_lookup,
           "dlsym(cuda, cuGetProcAddress_v2) is not " + want_lookup + "'s");
    if (via_dlsym1 == nullptr || via_dlsym2 == nullptr) {
        fail("no cuGetProcAddress in the stand-in");
        return 1;
    }
    // And as cudart finds them: cuGetProcAddress's answer for itself (with
    // internal pointers, a wrapper hooked by name).
    void* self1 = nullptr;
    void* self2 = nullptr;
    expect(cuGetProcAddress("cuGetProcAddress", &self1, 11080, 0) == CUDA_SUCCESS &&
               cuGetProcAddress_v2("cuGetProcAddress", &self2, 12040, 0, nullptr) == CUDA_SUCCESS,
           "cuGetProcAddress for itself");
    expect(place_of(self2).object == want_lookup,
           "cuGetProcAddress_v2(cuGetProcAddress, 12040) is " + place_of(self2).text() + ", not " +
               want_lookup + "'s");
    if (self1 == nullptr || self2 == nullptr) {
        return 1;
    }

    // A context, so that the wrappers find a device for the calls below.
    expect(cuInit(0) == CUDA_SUCCESS, "cuInit(0)");
    create_context();

    int replaced = 0;
    int by_name = 0;
    int refused = 0;
    std::set<std::string> statuses;
    for (const auto& route :
         {std::make_pair("direct", ask_all(&cuGetProcAddress, &cuGetProcAddress_v2)),
          std::make_pair("dlsym", ask_all(via_dlsym1, via_dlsym2)),
          std::make_pair("self", ask_all(reinterpret_cast<GetProc1>(self1),
                                         reinterpret_cast<GetProc2>(self2)))}) {
        for (const auto& [request, answer] : route.second) {
            const auto found = baseline.find(request);
            if (found == baseline.end()) {
                fail(describe(request) + ": not in the baseline");
                continue;
            }
            const Answer& want = found->second;
            const std::string what = std::string(route.first) + " " + describe(request);
            const bool hooked = on && want.result == CUDA_SUCCESS && is_cuda_hook(want.abi);
            if (hooked && internal && request.version > kKnownVersion) {
                // An internal pointer of an ABI the library cannot know: refused.
                expect(
                    answer.result == CUDA_ERROR_NOT_FOUND && answer.address == nullptr &&
                        (request.api == 1 || answer.status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND),
                    what + " = " + std::to_string(answer.result) + " status " +
                        std::to_string(answer.status) + " " + answer.place.text() +
                        ", want refused (500, status 1, null)");
                ++refused;
                continue;
            }
            expect(answer.result == want.result, what + " returned " +
                                                     std::to_string(answer.result) +
                                                     ", without us " + std::to_string(want.result));
            expect(answer.status == want.status, what + " symbolStatus " +
                                                     std::to_string(answer.status) +
                                                     ", without us " + std::to_string(want.status));
            if (request.api == 2) {
                expect(answer.status != -1, what + " left symbolStatus unset");
                statuses.insert(std::to_string(answer.status));
            }
            if (want.result == CUDA_SUCCESS) {
                expect(!want.abi.empty(),
                       what + ": the stand-in does not know its own answer " + want.place.text());
            }
            if (hooked && !internal) {
                // Our export of exactly that variant.
                expect(answer.place.object == "gpulimit" && answer.place.symbol == want.abi,
                       what + " = " + answer.place.text() + ", want gpulimit:" + want.abi);
                ++replaced;
            } else if (hooked) {
                // Hooked by name: ours, but not an export (those call the
                // stand-in's exports, not what it answered).
                expect(answer.place.object == "gpulimit" &&
                           answer.place.symbol.find("+offset") != std::string::npos,
                       what + " = " + answer.place.text() + ", want a wrapper of " + want.abi +
                           " hooked by name (not an export of libgpulimit.so)");
                ++by_name;
            } else if (want.result == CUDA_SUCCESS) {
                // Not ours: exactly the stand-in's answer.
                expect(answer.place.object == "cuda" && answer.abi == want.abi,
                       what + " = " + answer.place.text() + " (" + answer.abi + "), want cuda's " +
                           want.abi);
                void* const exported = dlsym(cuda, want.abi.c_str());
                expect(internal ? answer.address != exported : answer.address == exported,
                       what + (internal ? " is the export " : " is not the export ") + want.abi);
            }
            if (answer.result == CUDA_SUCCESS) {
                check_call(request, want.abi, answer);
            }
        }
    }
    // The checks above compare with the baseline; these make sure the
    // baseline covered what matters.
    expect(statuses.count(std::to_string(CU_GET_PROC_ADDRESS_SUCCESS)) == 1 &&
               statuses.count(std::to_string(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)) == 1 &&
               statuses.count(std::to_string(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)) == 1,
           "the requests did not produce all three symbolStatus values");
    const auto spot = [&](const char* name, int version, cuuint64_t flags, const char* symbol) {
        const auto found = baseline.find({2, name, version, flags});
        expect(found != baseline.end() && found->second.abi == symbol,
               std::string("the stand-in answers ") + name + "@" + std::to_string(version) +
                   " flags " + std::to_string(flags) + " with " +
                   (found != baseline.end() ? found->second.abi : "nothing") +
                   ", the test expects " + symbol);
    };
    spot("cuMemAllocAsync", 12040, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         "cuMemAllocAsync_ptsz");
    spot("cuMemAllocAsync", 12040, CU_GET_PROC_ADDRESS_DEFAULT, "cuMemAllocAsync");
    spot("cuGetProcAddress", 11080, CU_GET_PROC_ADDRESS_DEFAULT, "cuGetProcAddress");
    spot("cuGetProcAddress", 12040, CU_GET_PROC_ADDRESS_DEFAULT, "cuGetProcAddress_v2");
    spot("cuGraphInstantiate", 11080, CU_GET_PROC_ADDRESS_DEFAULT, "cuGraphInstantiate_v2");
    // A real driver (580.159.04) answers cuGraphInstantiate_v2 here, not
    // cuGraphInstantiateWithFlags (cuda.h 12's macro for the name).
    spot("cuGraphInstantiate", 13000, CU_GET_PROC_ADDRESS_DEFAULT, "cuGraphInstantiate_v2");
    spot("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         "cuLaunchKernel_ptsz");
    expect((on && !internal) == (replaced > 0), "replaced " + std::to_string(replaced) +
                                                    " pointers by our exports with the switch " +
                                                    (on ? "on" : "off"));
    expect((on && internal) == (by_name > 0) && (on && internal) == (refused > 0),
           "hooked " + std::to_string(by_name) + " pointers by name and refused " +
               std::to_string(refused) + " with the switch " + (on ? "on" : "off") +
               (internal ? " and internal pointers" : " and exports"));
    return g_failures == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: resolve_probe direct|dlsym|next|getproc\n");
        return 2;
    }
    const std::string mode = argv[1];
    if (mode == "getproc-baseline") {
        return run_getproc_baseline();
    }
    // The limiter's state, if the switch is on, in a directory of our own.
    char state[] = "/tmp/gpulimit-resolve-XXXXXX";
    if (switch_on() && mkdtemp(state) != nullptr) {
        setenv("GPU_LIMIT_STATE_DIR", state, 1);
    }
    int status = 2;
    if (mode == "direct") {
        status = run_direct();
    } else if (mode == "dlsym") {
        status = run_dlsym();
    } else if (mode == "next") {
        status = run_next();
    } else if (mode == "getproc") {
        status = run_getproc();
    } else {
        std::fprintf(stderr, "resolve_probe: unknown mode %s\n", mode.c_str());
    }
    if (switch_on()) {
        const std::string remove = std::string("rm -rf '") + state + "'";
        (void)std::system(remove.c_str());
    }
    std::printf("resolve_probe %s: %s (switch %s)\n", mode.c_str(), status == 0 ? "ok" : "FAILED",
                switch_on() ? "on" : "off");
    return status;
}
