// strata::nn — layers and the Module they are built on.
#pragma once

#include <strata/train/nn/activations.h>
#include <strata/train/nn/conv2d.h>
#include <strata/train/nn/dense.h>
#include <strata/train/nn/dropout.h>
#include <strata/train/nn/embedding.h>
#include <strata/train/nn/flatten.h>
#include <strata/train/nn/initializers.h>
#include <strata/train/nn/module.h>
#include <strata/train/nn/normalization.h>
#include <strata/train/nn/pooling.h>
#include <strata/train/nn/sequential.h>
