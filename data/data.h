// The input pipeline: Dataset and its stages, readers, and distributed-input helpers.
#pragma once

#include "data/binary_records.h"
#include "data/csv.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/input_context.h"
#include "data/iterator_state.h"
#include "data/labeled_arrays.h"
#include "data/mnist.h"
#include "data/synthetic.h"
