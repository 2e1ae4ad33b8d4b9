// The input pipeline: Dataset and its stages, readers, and distributed-input helpers.
#pragma once

#include <strata/data/binary_records.h>
#include <strata/data/csv.h>
#include <strata/data/dataset.h>
#include <strata/data/idx.h>
#include <strata/data/input_context.h>
#include <strata/data/iterator_state.h>
#include <strata/data/labeled_arrays.h>
#include <strata/data/mnist.h>
#include <strata/data/synthetic.h>
