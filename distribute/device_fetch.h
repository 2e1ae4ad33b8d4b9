// Copying input to the replicas' devices (InputOptions::experimental_fetch_to_device, and
// Strategy::experimental_distribute_values_from_function's values).
//
// On a CPU device `place_on` is a plain copy. On a device with asynchronous streams (CUDA)
// a host tensor is uploaded the way PyTorch's DataLoader does with pin_memory and
// non_blocking: staged through page-locked memory (or straight from it, when the tensor is
// pinned already) and copied on the device's input stream, a stream of its own, so the
// upload of the next batch runs while the step in flight computes. The stream the calling
// thread runs on for that device (its default stream on the prefetch thread, which is
// where replicas compute) is then made to wait for the copy without blocking the host, and
// the copy's memory is marked as used there, so the caching allocator reuses it only after
// that stream's work on it is done.
//
// Before, the upload was a blocking copy on the default stream: it waited behind every
// kernel queued there, so the host could run at most one step ahead of the device.
#pragma once

#include <strata/core/device.h>
#include <strata/core/stream.h>
#include <strata/core/tensor.h>

namespace strata::distribute {

// `t` on `device` when `fetch` (a copy unless it is there already), else `t`. A copy to
// an asynchronous device is ordered before the work the calling thread enqueues on it next.
Tensor place_on(const Tensor& t, const Device& device, bool fetch);

// The stream input uploads to `device` run on: one per device for the process, created on
// first use (CPU devices: an immediate stream).
Stream input_stream(const Device& device);

}  // namespace strata::distribute
