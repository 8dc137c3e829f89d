// /proc/<pid>/fdinfo/<fd> as `gpu-limit status` reads it to tell whether a
// process holds a slot's OFD lock: the "lock:" lines are the kernel's, but
// the rest of the file (and, through a FUSE or other file system, names in
// it) is not for the parser to trust. fdinfo_holds_lock never crashes, and
// says "held" only for a line with OFDLCK and WRITE naming that very file.
//
// Input: 8 bytes of lock offset, then the fdinfo text. The file asked about
// is fe:01 inode 77 (what the seeds lock).
#include "fuzz_check.hpp"
#include "gpuinit/limit/daemon.hpp"

#include <cstring>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace gpuinit;
    if (size < 8) {
        return 0;
    }
    uint64_t offset = 0;
    std::memcpy(&offset, data, sizeof offset);
    const std::string_view text = fuzz::as_text(data + 8, size - 8);
    const bool held = limit::fdinfo_holds_lock(text, 0xfe, 0x01, 77, offset);
    if (held) {
        FUZZ_CHECK(text.find("lock:") != std::string_view::npos);
        FUZZ_CHECK(text.find("OFDLCK") != std::string_view::npos);
        FUZZ_CHECK(text.find("WRITE") != std::string_view::npos);
        FUZZ_CHECK(text.find(":77") != std::string_view::npos);
    }
    // Another file (inode 78) is held only where a line names it.
    if (limit::fdinfo_holds_lock(text, 0xfe, 0x01, 78, offset)) {
        FUZZ_CHECK(text.find(":78") != std::string_view::npos);
    }
    return 0;
}
