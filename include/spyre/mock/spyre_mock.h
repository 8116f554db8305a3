/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mock transport: what spyre-mockdev and the driver's MockBackend share
 * beyond the hardware contract (include/spyre/uapi/).
 *
 * A FUSE mmap goes through the page cache and is not coherent with the
 * daemon's memory, so the mock serves every mappable region from a
 * shared-memory object instead of from the device node. Which object, and
 * which window of it, the driver learns from one ioctl on the device node it
 * holds: only the holder of a function learns its objects' names, as only the
 * holder of a VFIO device fd can map its BARs. A real card has no such ioctl;
 * its driver maps the device fd at the region's offset.
 *
 * The objects live in a directory of the daemon's own under /dev/shm
 * (<prefix>.d, mode 0710: its group may open a name it was told, not list
 * them). A name is "<directory>/<object>", relative to SPYRE_MOCK_SHM_DIR:
 * two components, neither empty, "." nor "..". The driver opens
 * SPYRE_MOCK_SHM_DIR "/" name (shm_open takes no inner '/').
 */
#ifndef SPYRE_MOCK_SPYRE_MOCK_H
#define SPYRE_MOCK_SPYRE_MOCK_H

#include <stdint.h>
#include <linux/ioctl.h>
#include "spyre/uapi/spyre_pci.h"

#define SPYRE_MOCK_SHM_NAME_MAX     64u
#define SPYRE_MOCK_SHM_DIR          "/dev/shm"

struct spyre_mock_region_shm {
    uint32_t argsz;             /* 0x00 caller sets sizeof */
    uint32_t index;             /* 0x04 in: region index (SPYRE_REGION_*) */
    char     shm_name[SPYRE_MOCK_SHM_NAME_MAX]; /* 0x08 "<dir>/<object>" under SPYRE_MOCK_SHM_DIR, empty if not mappable */
    uint64_t shm_offset;        /* 0x48 where the region starts in the object */
    uint64_t mmap_size;         /* 0x50 bytes that may be mapped from shm_offset */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_mock_region_shm) == 0x58, "mock region shm is 88 bytes");

/* Its own ioctl type: no VFIO or contract command shares it. */
#define SPYRE_MOCK_IOCTL_TYPE       'S'
#define SPYRE_MOCK_IOC_REGION_SHM   _IOWR(SPYRE_MOCK_IOCTL_TYPE, 1, struct spyre_mock_region_shm)

/* spyre-mockdev's exit codes (its --help lists them): scripts and the
 * driver's spawner read them. */
enum spyre_mock_exit {
    SPYRE_MOCK_EXIT_OK = 0,                /* stopped cleanly, or the daemon is up */
    SPYRE_MOCK_EXIT_INTERNAL = 1,
    SPYRE_MOCK_EXIT_USAGE = 2,             /* bad options: --cards, --vfs, --mem, ... */
    SPYRE_MOCK_EXIT_MOUNT_POINT = 3,
    SPYRE_MOCK_EXIT_SHM_PREFIX_IN_USE = 4,
    SPYRE_MOCK_EXIT_FUSE_MOUNT = 5,
};

#endif /* SPYRE_MOCK_SPYRE_MOCK_H */
