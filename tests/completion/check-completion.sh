#!/usr/bin/env bash
# The bash completion of gpuinit and its tools (completions/gpuinit):
#
#   check-completion.sh COMPLETION_FILE BUILD_DIR CMAKE GPUINIT PROGRAM=PATH...
#
# Drives the completion function as bash does (COMP_WORDS, COMP_CWORD) and
# checks COMPREPLY:
#  - representative cases: commands, subcommands, a subcommand's options,
#    directories for --root, enum values, GPUs from a --root tree, the
#    command after --;
#  - against the built tools' --help texts: every subcommand their usage
#    lines name and every long option their option lines list is completed
#    where the help puts it, and no option is completed that the help does
#    not list, so the completion cannot fall behind the tools;
#  - the install: `cmake --install --component bash-completion` gives every
#    program a file that bash-completion's loader finds by its name.
# Skips (77) only when bash-completion is not installed.
set -uo pipefail
completion=$1 build=$2 cmake=$3 gpuinit=$4
shift 4
declare -A tool_path=([gpuinit]=$gpuinit)
for arg in "$@"; do
  tool_path[${arg%%=*}]=${arg#*=}
done

# (GPUINIT_BASH_COMPLETION: another copy, or a missing one to see the skip.)
bash_completion=${GPUINIT_BASH_COMPLETION:-/usr/share/bash-completion/bash_completion}
if [[ ! -r $bash_completion ]]; then
  echo "SKIP: $bash_completion is missing: apt-get install bash-completion" >&2
  exit 77
fi
# shellcheck source=/dev/null
source "$bash_completion"
# shellcheck source=/dev/null
source "$completion"
# compopt works inside a completion bash started only; here it would fail
# and print (bash-completion's own test suite replaces it the same way).
compopt() { :; }

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuinit-completion.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
checks=0
fail() {
  echo "check-completion: FAIL: $*" >&2
  ((failures++))
}

# comp WORD... CUR: complete CUR after the words, as bash would: the words
# split where COMP_WORDBREAKS splits them (':' and '=' are the ones here).
comp() {
  local -a split_words=()
  local word piece
  for word in "$@"; do
    if [[ $word =~ [:=] ]]; then
      while [[ $word =~ ^([^:=]*)([:=]+)(.*)$ ]]; do
        [[ ${BASH_REMATCH[1]} ]] && split_words+=("${BASH_REMATCH[1]}")
        split_words+=("${BASH_REMATCH[2]}")
        word=${BASH_REMATCH[3]}
      done
      piece=$word
      [[ $piece ]] && split_words+=("$piece")
      # A word ending in ':' or '=' leaves the cursor on an empty word
      # only when it is not the last one.
    else
      split_words+=("$word")
    fi
  done
  COMP_WORDS=("${split_words[@]}")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMP_LINE="$*"
  COMP_POINT=${#COMP_LINE}
  COMPREPLY=()
  local spec function
  spec=$(complete -p "${COMP_WORDS[0]##*/}" 2>/dev/null) || {
    fail "no completion registered for ${COMP_WORDS[0]}"
    return
  }
  function=${spec#*-F }
  function=${function%% *}
  "$function" "${COMP_WORDS[0]}" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]-}"
}

# has WORD... / lacks WORD...: about the last comp's COMPREPLY.
has() {
  local want got
  for want in "$@"; do
    ((checks++))
    for got in "${COMPREPLY[@]}"; do
      [[ $got == "$want" ]] && continue 2
    done
    fail "'${COMP_LINE}' does not complete '$want' (got: ${COMPREPLY[*]})"
  done
}
lacks() {
  local unwanted got
  for unwanted in "$@"; do
    ((checks++))
    for got in "${COMPREPLY[@]}"; do
      [[ $got == "$unwanted" ]] && fail "'${COMP_LINE}' completes '$unwanted' (got: ${COMPREPLY[*]})"
    done
  done
}
exactly() {
  ((checks++))
  [[ "${COMPREPLY[*]}" == "$*" ]] || fail "'${COMP_LINE}' gives '${COMPREPLY[*]}', not '$*'"
}

# --- Representative cases ---
mkdir -p "$work/tree/a-dir" "$work/tree/proc/driver/nvidia/gpus/0000:41:00.0"
touch "$work/tree/a-file"
cd "$work/tree" || exit 1

comp gpuinit ''
has mknod modload persist mig limit limit-runtime status
comp gpuinit status --p
exactly --prometheus
comp gpuinit status --root ''
has a-dir
lacks a-file
comp gpuinit mi
exactly mig
comp gpu-mig ''
has pick list sync release gres env apply
lacks --json
comp gpu-mig gres --
has --type-style --type-map --check --if-exists --json
lacks --hold --profile --dry-run
comp gpuinit mig pick --f
exactly --format
comp gpu-mig pick --format ''
exactly uuid key
comp gpu-mig --json gres --type-style p
exactly profile
comp gpu-mig gres --check ''
has a-file a-dir
comp gpu-mig apply --check --
has --force --reset-if-needed
comp gpu-mknod --root ''
has a-dir
lacks a-file
comp gpu-mknod --root=''
has a-dir
lacks a-file
comp gpu-mknod --root "$work/tree" --device ''
exactly 0000:41:00.0
# bash splits the word at ':' and completes its last piece.
comp gpu-mknod --root "$work/tree" --device 0000:4
exactly 41:00.0
comp gpu-persist -r "$work/tree" enable ''
has all 0000:41:00.0
comp gpu-persist nvidia-smi-set 0000:41:00.0 ''
exactly on off
comp gpu-persist status --
has --json
lacks --user --daemon
comp gpu-modload nvidia ''
has nvidia_uvm
comp gpu-modload nvidia --
lacks --check --dry-run
comp gpu-limit ''
has run status daemon oci-hook runtime
comp gpu-limit run --oom-policy ''
exactly return kill
comp gpu-limit run --mem 1G -- bas
has bash
comp gpu-limit daemon --o
exactly --oom-grace --oom-script --once
comp gpu-limit oci-hook ''
exactly precreate poststop
comp gpu-limit-runtime --state-root ''
has a-dir
lacks a-file
comp gpu-limit-runtime --library /x create --
lacks --library --help

# --- Against the tools' --help ---

# The subcommands a usage line names after PREFIX ("gpu-mig pick ...",
# "gpu-persist enable|disable GPU|all"): bracketed groups are options.
subcommands_of() {
  local prefix=$1 help=$2 line rest first
  while IFS= read -r line; do
    [[ $line =~ ^(Usage:\ |\ +)(.*)$ ]] || continue
    rest=${BASH_REMATCH[2]}
    [[ $rest == "$prefix "* ]] || continue
    rest=${rest#"$prefix "}
    while [[ $rest =~ \[[^][]*\] ]]; do
      rest=${rest/"${BASH_REMATCH[0]}"/}
    done
    read -r first _ <<<"$rest"
    [[ ${first-} =~ ^[a-z][a-z0-9|-]*$ ]] && printf '%s\n' "${first//|/$'\n'}"
  done <<<"$help"
}

# check_context PREFIX HELP_COMMAND COMPLETE_WORDS: PREFIX is the program as
# the help's usage lines write it ("gpu-limit daemon"); the others are
# space-separated words.
check_context() {
  local prefix=$1 help_words=$2 complete_words=$3
  local -a help_command words_here subs own=()
  read -ra help_command <<<"$help_words"
  read -ra words_here <<<"$complete_words"
  local help sub sub_help
  help=$("${help_command[@]}" --help) || {
    fail "$help_words --help failed"
    return
  }
  mapfile -t subs < <(subcommands_of "$prefix" "$help" | sort -u)
  for sub in "${subs[@]}"; do
    comp "${words_here[@]}" ''
    has "$sub"
    # A subcommand with a help of its own is a context of its own.
    sub_help=$("${help_command[@]}" "$sub" --help 2>/dev/null)
    if [[ $sub_help != "$help" && $sub_help == "Usage: $prefix $sub"* ]]; then
      check_context "$prefix $sub" "$help_words $sub" "$complete_words $sub"
    else
      own+=("$sub")
    fi
  done

  # Option lines ("  -r, --root DIR ...") under their section: "pick
  # options:" belongs to pick, "Common options:" and "Options:" to every
  # context, a section that names no subcommand ("Daemon options:") to the
  # tool without one.
  local -a scope=(- "${own[@]}") listed=()
  local line head word option context
  declare -A where=()
  while IFS= read -r line; do
    if [[ $line =~ ^([A-Za-z][A-Za-z\ -]*\ )?[Oo]ptions(\ \(.*\))?:$ ]]; then
      head=${BASH_REMATCH[1]% }
      head=${head,,}
      if [[ -z $head || $head == common ]]; then
        scope=(- "${own[@]}")
      else
        scope=()
        for word in ${head// and / }; do
          if [[ " ${own[*]} " == *" $word "* ]]; then
            scope+=("$word")
          else
            scope+=(-)
          fi
        done
      fi
    elif [[ $line =~ ^\ +(-[A-Za-z0-9],\ +)?(--[a-z0-9][a-z0-9-]*) ]]; then
      option=${BASH_REMATCH[2]}
      listed+=("$option")
      for context in "${scope[@]}"; do
        where[$context]+=" $option"
      done
    fi
  done <<<"$help"
  # A help without option lines (gpuinit's) names its options in the text.
  if ((${#listed[@]} == 0)); then
    mapfile -t listed < <(grep -oE -- '--[a-z][a-z0-9-]*' <<<"$help" | sort -u)
  fi

  for context in - "${own[@]}"; do
    local -a at=("${words_here[@]}")
    [[ $context == - ]] || at+=("$context")
    comp "${at[@]}" --
    # shellcheck disable=SC2086 # a list of words
    has ${where[$context]-}
    for option in "${COMPREPLY[@]}"; do
      ((checks++))
      [[ " ${listed[*]} " == *" $option "* ]] ||
        fail "'${COMP_LINE}' completes $option, which '$help_words --help' does not list"
    done
  done
}

mapfile -t commands < <("$gpuinit" --help | sed -nE 's/^  ([a-z][a-z-]*) +(gpu-[a-z-]+) .*/\1 \2/p')
((${#commands[@]} > 0)) || fail "no commands in '$gpuinit --help'"
check_context gpuinit "$gpuinit" gpuinit
for entry in "${commands[@]}"; do
  read -r name program <<<"$entry"
  if [[ -z ${tool_path[$program]-} ]]; then
    fail "$program (gpuinit --help) is not among the programs this test was given"
    continue
  fi
  check_context "$program" "${tool_path[$program]}" "$program"
  check_context "$program" "$gpuinit $name" "gpuinit $name"
done

# gpuinit status is a command of gpuinit alone (no program of its own).
check_context "gpuinit status" "$gpuinit status" "gpuinit status"

# --- The install: a file per program where bash-completion's loader looks ---
dest=$work/dest
if DESTDIR=$dest "$cmake" --install "$build" --prefix /usr --component bash-completion \
  >"$work/install.log" 2>&1; then
  completionsdir=$(pkg-config --variable=completionsdir bash-completion 2>/dev/null)
  completionsdir=${completionsdir:-/usr/share/bash-completion/completions}
  for entry in "${commands[@]}" "- gpuinit"; do
    read -r _ program <<<"$entry"
    ((checks++))
    if [[ ! -r $dest$completionsdir/$program ]]; then
      fail "no $completionsdir/$program installed"
      continue
    fi
    # The loader sources the file by the program's name, in a fresh shell.
    got=$(XDG_DATA_DIRS=$dest/usr/share BASH_COMPLETION_USER_DIR=$work/none bash -c '
      source "$1"
      __load_completion "$2" && complete -p "$2"' _ "$bash_completion" "$program" 2>&1)
    [[ $got == *"-F _gpuinit $program" ]] ||
      fail "bash-completion's loader does not load $program's completion: $got"
  done
else
  cat "$work/install.log" >&2
  fail "cmake --install --component bash-completion failed"
fi

if ((failures > 0)); then
  echo "check-completion: $failures of $checks checks failed" >&2
  exit 1
fi
echo "check-completion: $checks checks passed"
