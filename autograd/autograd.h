// The autograd public API in one include.
#pragma once

#include "autograd/custom_gradient.h"
#include "autograd/gradcheck.h"
#include "autograd/gradient_registry.h"
#include "autograd/tape.h"
#include "autograd/variable.h"
