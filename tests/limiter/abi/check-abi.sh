#!/bin/sh
# The binary interface of libgpulimit.so, read from the file itself:
#   check-abi.sh LIBRARY ENTRY_POINTS_DEF LINK_MAP GLIBC_OLD [--expect-fail REGEX]
#
# 1. imports: no GLIBC_ version above 2.17 (the baseline: Debian 11+, Ubuntu
#    18.04+, UBI8, CentOS 7 CUDA images), no GLIBCXX_/CXXABI_/GCC_ version
#    (no libstdc++ or libgcc_s at run time);
# 2. DT_NEEDED: only glibc's libraries; libdl.so.2 and libpthread.so.0 present
#    (the old dl*/pthread_* versions live there before glibc 2.34); never
#    libcuda, NVML, libstdc++ or libgcc_s;
# 3. exports: exactly the GPULIMIT_*_HOOK names of entry_points.def, in
#    GPULIMIT_1, plus dlsym as GLIBC_2.34 (default) and GLIBC_OLD;
# 4. nothing runs at load time: .init_array holds only crtbeginS's
#    frame_dummy, no dynamic initializer (_GLOBAL__sub_I_*), no .ctors;
# 5. the link map shows no member of libstdc++.a, libsupc++.a or libgcc_eh.a
#    (std::string, operator new, exceptions, function-local static guards
#    would each pull one in), and the library has no text relocations.
# With --expect-fail REGEX it inverts: it succeeds only when the checks fail
# with a problem line matching REGEX (the negative tests).
set -u
library=$1 def=$2 linkmap=$3 glibc_old=$4
expect_fail=
if [ "${5-}" = --expect-fail ]; then
    expect_fail=$6
fi

problems=$(mktemp)
trap 'rm -f "$problems" "$problems".*' EXIT
problem() { printf 'FAIL: %s\n' "$*" >>"$problems"; }

for tool in objdump readelf nm; do
    command -v "$tool" >/dev/null || { echo "check-abi: $tool not found (binutils)" >&2; exit 2; }
done
[ -f "$library" ] || { echo "check-abi: no $library" >&2; exit 2; }

# objdump -T: "ADDR FLAGS SECTION SIZE VERSION NAME"; VERSION is "(V)" for a
# non-default (hidden) one, "V" for the default, "Base" for unversioned.
objdump -T "$library" | awk '$0 ~ /^[0-9a-f]+ / { print }' >"$problems.dynsym"

# 1. imports
awk '/\*UND\*/ { print $(NF-1), $NF }' "$problems.dynsym" | tr -d '()' |
while read -r version name; do
    case $version in
    GLIBC_2.*)
        minor=${version#GLIBC_2.}; minor=${minor%%.*}
        if [ "$minor" -gt 17 ]; then
            problem "import $name@$version is above the GLIBC_2.17 baseline (pin it in gpulimit/src/glibc_baseline.h)"
        fi ;;
    GLIBCXX_* | CXXABI_* | GCC_*)
        problem "import $name@$version needs libstdc++/libgcc_s at run time" ;;
    Base) ;;
    *) problem "import $name@$version: unexpected version" ;;
    esac
done

# 2. DT_NEEDED
needed=$(readelf -d "$library" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for lib in $needed; do
    case $lib in
    libc.so.6 | libdl.so.2 | libpthread.so.0 | libm.so.6 | librt.so.1 | ld-linux-*.so.*) ;;
    *) problem "DT_NEEDED $lib: only glibc's libraries may be needed (libcuda and NVML are dlopened)" ;;
    esac
done
for lib in libdl.so.2 libpthread.so.0; do
    case " $(echo $needed) " in
    *" $lib "*) ;;
    *) problem "DT_NEEDED $lib is missing: the pinned old symbol versions are there on glibc < 2.34" ;;
    esac
done

# 3. exports
sed -n 's/^GPULIMIT_\(CUDA\|NVML\)_HOOK(\([A-Za-z_][A-Za-z0-9_]*\),.*/\2 GPULIMIT_1/p' "$def" >"$problems.want"
if [ ! -s "$problems.want" ]; then
    problem "no GPULIMIT_*_HOOK in $def"
fi
printf 'dlsym GLIBC_2.34\ndlsym (%s)\n' "$glibc_old" >>"$problems.want"
sort -o "$problems.want" "$problems.want"
# Defined symbols, without the absolute symbols that name version nodes.
awk '!/\*UND\*/ && !/\*ABS\*/ { print $NF, $(NF-1) }' "$problems.dynsym" | sort >"$problems.have"
comm -13 "$problems.want" "$problems.have" | while read -r line; do
    problem "exported but not a hook of entry_points.def: $line"
done
comm -23 "$problems.want" "$problems.have" | while read -r line; do
    problem "a hook of entry_points.def is not exported: $line"
done

# 4. load time
init_size=$(readelf -W -S "$library" | awk '$2 == ".init_array" { print $6 }')
if [ -n "$init_size" ] && [ $((0x$init_size)) -gt 8 ]; then
    problem ".init_array has $((0x$init_size / 8)) entries: a constructor or a dynamic initializer runs at load time"
fi
if readelf -W -S "$library" | grep -q ' \.ctors '; then
    problem ".ctors section: something runs at load time"
fi
if nm "$library" 2>/dev/null | grep -q '_GLOBAL__sub_I_'; then
    problem "a global with a dynamic initializer: $(nm "$library" | grep -o '_GLOBAL__sub_I_[A-Za-z0-9_.]*' | head -3 | tr '\n' ' ')"
fi

# 5. runtime libraries pulled in statically, text relocations
if [ -f "$linkmap" ]; then
    grep -o '[^ ]*\(libstdc++\|libsupc++\|libgcc_eh\)\.a([^)]*)' "$linkmap" | sort -u |
    while read -r member; do
        problem "links $member: the library must not use the C++ runtime (heap, std::string, exceptions, static guards)"
    done
else
    problem "no link map $linkmap"
fi
if readelf -d "$library" | grep -q 'TEXTREL'; then
    problem "text relocations"
fi

if [ -s "$problems" ]; then
    cat "$problems"
    if [ -n "$expect_fail" ]; then
        if grep -qF -- "$expect_fail" "$problems"; then
            echo "check-abi: failed as expected ($expect_fail)"
            exit 0
        fi
        echo "check-abi: failed, but not with: $expect_fail"
    fi
    exit 1
fi
if [ -n "$expect_fail" ]; then
    echo "check-abi: passed, but should have failed with: $expect_fail"
    exit 1
fi
echo "check-abi: $library: $(wc -l <"$problems.want") exports, imports within GLIBC_2.17, nothing at load time"
