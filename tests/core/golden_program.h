// The golden-case runner lives with strata-golden (tools/golden/golden_program.h); the
// core tests run the same mapping forward.
#pragma once
#include "tools/golden/golden_program.h"
