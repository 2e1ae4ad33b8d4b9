// The autograd public API in one include.
#pragma once

#include <strata/autograd/custom_gradient.h>
#include <strata/autograd/gradcheck.h>
#include <strata/autograd/gradient_registry.h>
#include <strata/autograd/tape.h>
#include <strata/autograd/variable.h>
