#!/bin/sh
# Test trainer that hunts for the job token, as a trainer of the same user could:
# it reads its own environment, every process's environment and command line
# it may read, the file each `--token-file PATH` names, the descriptor each
# `--token-fd N` names (as /proc/PID/fd/N), and every descriptor of every
# process it may open. Everything it read goes to OUT/found.txt; OUT/done marks
# the end of the hunt. Then it exits 0 without reading its stream (the worker
# fails once its restarts are spent: the test wants the hunt only).
#
# Usage: token_hunt.sh OUT
out="$1"
found="$out/found.txt"
: > "$found"

grab() {
    timeout 1 head -c 4096 "$1" >> "$found" 2>/dev/null
    echo >> "$found"
}

env >> "$found"
exec 2>/dev/null
for proc in /proc/[0-9]*; do
    tr '\0' '\n' < "$proc/environ" >> "$found" 2>/dev/null
    tr '\0' '\n' < "$proc/cmdline" > "$out/args" 2>/dev/null || continue
    prev=""
    while IFS= read -r arg; do
        case "$prev" in
            --token-file) grab "$arg" ;;
            --token-fd) grab "$proc/fd/$arg" ;;
        esac
        case "$arg" in
            --token-file=*) grab "${arg#--token-file=}" ;;
            --token-fd=*) grab "$proc/fd/${arg#--token-fd=}" ;;
        esac
        prev="$arg"
    done < "$out/args"
    for fd in "$proc"/fd/*; do
        [ -e "$fd" ] && grab "$fd"
    done
done
: > "$out/done"
exit 0
