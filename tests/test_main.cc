// Catch2's main for every strata test executable.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
