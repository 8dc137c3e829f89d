#!/bin/sh
# cmake/CheckThinTools.cmake on fixture mains built here: a thin main passes,
# and each kind of logic the rule keeps out of tools/ is caught with its
# file:line, so the configure-time check on tools/ cannot pass by matching
# nothing.
# Usage: check-thin-tools.sh SOURCE_DIR
set -eu
check=$1/cmake/CheckThinTools.cmake
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() {
  echo "check-thin-tools: $*" >&2
  exit 1
}

cat >"$dir/thin.cpp" <<'CPP'
// A main that opens nothing itself: Sysroot::open is the library's.
#include "gpuinit/fs/sysroot.hpp"
int run(int argc, char** argv) {
    auto root = gpuinit::Sysroot::open("/"); // not ::open(
    return root ? 0 : 1;
}
CPP
cmake -DTOOLS_DIR="$dir" -P "$check" >"$dir/out" 2>&1 || fail "a thin main was refused: $(cat "$dir/out")"

expect() { # NAME LINE TEXT: the fixture NAME.cpp with TEXT at LINE must fail there
  printf '#include <unistd.h>\nint run() {\n    %s\n    return 0;\n}\n' "$3" >"$dir/$1.cpp"
  if cmake -DTOOLS_DIR="$dir" -P "$check" >"$dir/out" 2>&1; then
    fail "$1.cpp ($3) passed"
  fi
  grep -q "tools/$1.cpp:$2:" "$dir/out" || fail "$1.cpp: no tools/$1.cpp:$2 in: $(cat "$dir/out")"
  rm -f "$dir/$1.cpp"
}
expect raw_open 3 'int fd = ::open("/proc/x", 0);'
expect raw_openat 3 'int fd = ::openat(3, "x", 0);'
expect forks 3 'pid_t pid = fork();'
expect vforks 3 'pid_t pid = ::vfork();'
expect spawns 3 'posix_spawn(nullptr, "x", nullptr, nullptr, nullptr, nullptr);'
expect execs 3 '::execvp("x", nullptr);'
expect loads 3 'void* nvml = dlopen("libnvidia-ml.so.1", 0);'

# A comment may name them (the rule is about code).
printf '// fork() and dlopen() are the library'"'"'s\nint run() { return 0; }\n' >"$dir/comment.cpp"
cmake -DTOOLS_DIR="$dir" -P "$check" >"$dir/out" 2>&1 || fail "a comment was refused: $(cat "$dir/out")"
rm -f "$dir/comment.cpp"

# One line over the budget fails, the budget itself passes.
budget=$(sed -n 's/^set(GPUINIT_TOOL_LINE_BUDGET \([0-9]*\))$/\1/p' "$check")
[ -n "$budget" ] || fail "no GPUINIT_TOOL_LINE_BUDGET in $check"
awk -v n="$budget" 'BEGIN { for (i = 0; i < n; i++) print "// line" }' >"$dir/long.cpp"
cmake -DTOOLS_DIR="$dir" -P "$check" >"$dir/out" 2>&1 || fail "$budget lines were refused"
echo '// one more' >>"$dir/long.cpp"
if cmake -DTOOLS_DIR="$dir" -P "$check" >"$dir/out" 2>&1; then
  fail "$((budget + 1)) lines passed"
fi
grep -q "tools/long.cpp: $((budget + 1)) lines" "$dir/out" || fail "no line count in: $(cat "$dir/out")"
echo "check-thin-tools: the check passes a thin main and catches 7 kinds of effect and the line budget"
