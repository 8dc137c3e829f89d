#!/usr/bin/env bash
# The README's own tests (label unit; docs/testing.md):
#   check-readme.sh budget README MAX
#       README has at most MAX lines.
#   check-readme.sh tools README GPUINIT_MAN TOOL...
#       every TOOL has a row in README's tool table ("| `TOOL` |") and is
#       named as *TOOL*(8) in the command list of gpuinit(8) (the DESCRIPTION
#       section of GPUINIT_MAN).
#   check-readme.sh recipe README NAME PATH-DIR...
#       extracts the ```sh blocks marked "<!-- recipe: NAME -->" (or
#       "<!-- recipe: NAME root -->") and runs them, word for word, in one
#       temporary directory with each PATH-DIR first on PATH, in order; each
#       block with sh -e, so any command that fails fails the test. Blocks
#       that do not say "root" run as an unprivileged user when this runs as
#       root (the README says they need no root); "root" blocks need root
#       and are skipped (exit 77) without it.
#   check-readme.sh ci README CI_SCRIPT
#       the README's test command (the block marked <!-- recipe: tests -->)
#       is the command CI_SCRIPT (.ci/run) ends with, word for word.
#   check-readme.sh extract README NAME
#       prints the blocks of recipe NAME, for the scenario tests that run
#       a role's recipe word for word (tests/limiter/containers/seed.sh);
#       fails when there is none.
set -euo pipefail

die() {
  echo "check-readme: FAIL: $*" >&2
  exit 1
}

# Prints block I (0-based) of recipe NAME from README, or nothing.
# The marker line must be followed directly by the ```sh fence.
extract() {
  awk -v name="$2" -v want="$3" '
    BEGIN { n = -1; state = 0 }
    state == 2 && /^```[[:space:]]*$/ { state = 0; next }
    state == 2 { if (n == want) print; next }
    state == 1 { if ($0 ~ /^```sh[[:space:]]*$/) { n++; state = 2 } else state = 0; next }
    $0 ~ "^<!-- recipe: " name "( root)? -->$" { state = 1 }
  ' "$1"
}

# The attribute of block I: "root" or "user".
block_kind() {
  awk -v name="$2" -v want="$3" '
    BEGIN { n = -1 }
    prev != "" && /^```sh[[:space:]]*$/ { n++; if (n == want) { print prev; exit } }
    { prev = "" }
    $0 ~ "^<!-- recipe: " name " root -->$" { prev = "root" }
    $0 ~ "^<!-- recipe: " name " -->$" { prev = "user" }
  ' "$1"
}

mode=${1:-}
shift || true
case $mode in
budget)
  readme=$1 max=$2
  lines=$(wc -l <"$readme")
  ((lines <= max)) || die "$readme has $lines lines, more than its budget of $max: move detail to a man page, CONTRIBUTING.md or docs/"
  echo "check-readme: $readme: $lines lines (budget $max)"
  ;;
tools)
  readme=$1 man=$2
  shift 2
  (($# > 0)) || die "no tools given"
  # The command list of gpuinit(8): its DESCRIPTION section.
  commands=$(awk '/^# /{ on = ($0 == "# DESCRIPTION") ; next } on' "$man")
  [[ -n $commands ]] || die "$man has no DESCRIPTION section"
  for tool in "$@"; do
    grep -q "^| \`$tool\` |" "$readme" ||
      die "$tool is not in the tool table of $readme (a row starting | \`$tool\` |)"
    if [[ $tool != gpuinit ]]; then
      grep -qF "*$tool*(8)" <<<"$commands" ||
        die "$tool is not in the command list of $man (DESCRIPTION: *$tool*(8))"
    fi
  done
  echo "check-readme: every tool ($*) in $readme's table and $man's list"
  ;;
recipe)
  readme=$1 name=$2
  shift 2
  path=
  for dir in "$@"; do path+="$(cd "$dir" && pwd):"; done
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  user_prefix=()
  if [[ $(id -u) -eq 0 ]]; then
    command -v setpriv >/dev/null || die "setpriv (util-linux) is needed to run the recipe as a user"
    chown 65534:65534 "$work"
    chmod 0755 "$work"
    user_prefix=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
    # A build tree the user cannot reach (a checkout under /root): the same
    # executables, copied where it can.
    user_path=
    n=0
    for dir in "$@"; do
      if ! "${user_prefix[@]}" test -x "$dir"; then
        copy=$work/.bin$n
        mkdir -m 0755 "$copy"
        find -L "$dir/" -maxdepth 1 -type f -perm -u+x -exec cp -L {} "$copy/" \;
        chmod -R a+rX "$copy"
        dir=$copy
      fi
      user_path+="$(cd "$dir" && pwd):"
      n=$((n + 1))
    done
  fi
  i=0 ran=0 skipped=0
  while kind=$(block_kind "$readme" "$name" "$i") && [[ -n $kind ]]; do
    extract "$readme" "$name" "$i" >"$work/.block$i.sh"
    [[ -s $work/.block$i.sh ]] || die "recipe $name, block $i is empty"
    echo "check-readme: recipe $name, block $i ($kind):"
    sed 's/^/  | /' "$work/.block$i.sh"
    prefix=()
    block_path=$path
    if [[ $kind == user ]]; then
      prefix=("${user_prefix[@]}")
      block_path=${user_path:-$path}
    elif [[ $(id -u) -ne 0 ]]; then
      echo "check-readme: SKIPPED recipe $name, block $i: it needs root" >&2
      skipped=$((skipped + 1))
      i=$((i + 1))
      continue
    fi
    status=0
    (cd "$work" && env PATH="$block_path$PATH" "${prefix[@]}" sh -e "$work/.block$i.sh") || status=$?
    ((status == 0)) || die "recipe $name, block $i exited $status (its output is above)"
    ran=$((ran + 1))
    i=$((i + 1))
  done
  ((i > 0)) || die "$readme has no block marked <!-- recipe: $name --> followed by a \`\`\`sh fence"
  if ((skipped > 0)); then
    exit 77
  fi
  echo "check-readme: recipe $name: $ran block(s) ran, $skipped skipped"
  ;;
ci)
  readme=$1 ci=$2
  command=$(extract "$readme" tests 0)
  [[ -n $command ]] || die "$readme has no test command (a \`\`\`sh block marked <!-- recipe: tests -->)"
  [[ $command != *$'\n'* ]] || die "$readme's test command is more than one line: $command"
  last=$(grep -v '^[[:space:]]*\(#\|$\)' "$ci" | tail -n 1)
  [[ $last == "$command" ]] ||
    die "$ci ends with '$last', not the README's test command '$command': CI must run exactly that"
  echo "check-readme: $ci runs the README's test command: $command"
  ;;
extract)
  readme=$1 name=$2
  i=0
  while kind=$(block_kind "$readme" "$name" "$i") && [[ -n $kind ]]; do
    extract "$readme" "$name" "$i"
    i=$((i + 1))
  done
  ((i > 0)) || die "$readme has no block marked <!-- recipe: $name --> followed by a \`\`\`sh fence"
  ;;
*)
  echo "usage: check-readme.sh budget README MAX | tools README GPUINIT_MAN TOOL... | recipe README NAME PATH-DIR... | ci README CI_SCRIPT | extract README NAME" >&2
  exit 1
  ;;
esac
