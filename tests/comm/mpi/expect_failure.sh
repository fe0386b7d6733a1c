#!/bin/sh
# Runs a command that must FAIL: non-zero exit, within <seconds> (exit 124 from timeout = a
# hang), with output matching <regex>. Usage: expect_failure.sh <seconds> <regex> <command...>
limit=$1
regex=$2
shift 2
start=$(date +%s)
out=$(timeout -k 5 "$limit" "$@" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
printf '%s\n' "$out" | tail -n 40
if [ "$rc" -eq 0 ]; then echo "FAIL: the command exited 0"; exit 1; fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "FAIL: no exit within $limit s (hang)"; exit 1; fi
if ! printf '%s\n' "$out" | grep -Eq "$regex"; then echo "FAIL: output does not match /$regex/"; exit 1; fi
echo "OK: exit status $rc after ${elapsed} s, output matches /$regex/"
