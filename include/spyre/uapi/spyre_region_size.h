/* SPDX-License-Identifier: Apache-2.0 */
/* The size of each region of a function (docs/hardware.md, "BARs"), in one
 * place for the device model and the driver. */
#ifndef SPYRE_UAPI_SPYRE_REGION_SIZE_H
#define SPYRE_UAPI_SPYRE_REGION_SIZE_H

#include <stdint.h>
#include "spyre_ioctl.h"
#include "spyre_pci.h"
#include "spyre_regs.h"

/* Region `index`'s size in bytes for a function of `mem_size` bytes of
 * device memory; 0 for an index that is no region. */
static inline uint64_t spyre_region_size(uint32_t index, uint64_t mem_size) {
    switch (index) {
    case SPYRE_REGION_BAR0: return SPYRE_BAR0_SIZE;
    case SPYRE_REGION_BAR2: return SPYRE_BAR2_SIZE;
    case SPYRE_REGION_BAR4: return SPYRE_BAR4_SIZE;
    case SPYRE_REGION_CONFIG: return SPYRE_CONFIG_SIZE;
    case SPYRE_REGION_DEVMEM: return mem_size;
    default: return 0;
    }
}

#endif
