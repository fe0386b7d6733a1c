#!/bin/sh
# Every test test_costs.cmake gives a COST exists in test_sim: ctest ignores a COST whose test
# was renamed, and the long simulations would quietly go back to starting last.
#   check_costs.sh TEST_SIM_BINARY COSTS_FILE
set -eu
list=$("$1" --gtest_list_tests | awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}')
missing=0
for name in $(sed -n 's/^set_tests_properties(\([A-Za-z0-9_.]*\).*/\1/p' "$2"); do
  if ! printf '%s\n' "$list" | grep -qx "$name"; then
    echo "test_costs.cmake names $name, which test_sim does not have"
    missing=1
  fi
done
[ "$missing" = 0 ] && echo "costs name existing tests"
exit "$missing"
