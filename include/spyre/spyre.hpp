// SPDX-License-Identifier: Apache-2.0
// Umbrella header of libspyre.
#pragma once

#include "spyre/allocator.hpp"
#include "spyre/device_handle.hpp"
#include "spyre/dma_engine.hpp"
#include "spyre/driver/command_ring.hpp"
#include "spyre/driver/config_space.hpp"
#include "spyre/driver/device_environment.hpp"
#include "spyre/driver/discovery.hpp"
#include "spyre/driver/dma_queue.hpp"
#include "spyre/driver/function.hpp"
#include "spyre/driver/mock_daemon.hpp"
#include "spyre/driver/register_dump.hpp"
#include "spyre/error.hpp"
#include "spyre/kernel_builder.hpp"
#include "spyre/layout.hpp"
#include "spyre/pack.hpp"
#include "spyre/program_image.hpp"
#include "spyre/scales.hpp"
#include "spyre/version.hpp"
