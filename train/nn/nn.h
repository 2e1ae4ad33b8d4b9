// strata::nn — layers and the Module they are built on.
#pragma once

#include "train/nn/activations.h"
#include "train/nn/conv2d.h"
#include "train/nn/dense.h"
#include "train/nn/dropout.h"
#include "train/nn/embedding.h"
#include "train/nn/flatten.h"
#include "train/nn/initializers.h"
#include "train/nn/module.h"
#include "train/nn/normalization.h"
#include "train/nn/pooling.h"
#include "train/nn/sequential.h"
