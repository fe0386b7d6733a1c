# Read by ctest after the discovered gtest lists (TEST_INCLUDE_FILES, tests/sim/tests.cmake): the
# paper-figure simulations of test_sim get a COST, so `ctest -j` starts them first (descending cost)
# instead of last on a busy runner. Only the order matters: the values are their seconds on 2 cores
# before the simulator speed-ups of 2026-11. ctest ignores a name that no longer exists, so
# sim_costs_name_existing_tests (check_costs.sh) fails when one does not.
set_tests_properties(SeesawFig10.FactorsInBandsAndSeesawAboveTheBestFixedPlanEverywhere PROPERTIES COST 263)
set_tests_properties(SidpExperiments.MechanismsOnH20 PROPERTIES COST 45)
set_tests_properties(SidpExperiments.Fig12TightMemory PROPERTIES COST 14)
set_tests_properties(SidpExperiments.Fig10PeakShifting PROPERTIES COST 11)
set_tests_properties(SeesawFig13.BestFixedPlanMovesFromPp8ToTp2Pp4ToTp4Pp2AndSeesawIsAboveAll PROPERTIES COST 68)
set_tests_properties(SeesawFig14.SeesawAboveEveryFixedPlanFromTenthToFiftyTimesPcieAndPpForSlowLinksTpForFast
                     PROPERTIES COST 48)
set_tests_properties(NitsumPaper.Fig2Fig3SloScaleThreeTiersFig17 PROPERTIES COST 17)
