/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spyre hardware contract: the device node interface (VFIO-style).
 *
 * Each function has a device node (MOUNT/dev/spyre/<pci address>). Opening it
 * claims the function: one open file at a time, a second open gets EBUSY.
 *
 * FUSE passes only "restricted" ioctls on regular files: commands encoded
 * with _IOR/_IOW/_IOWR and a fixed size. VFIO's own numbers are _IO (no
 * size), so the commands are redefined here with VFIO's type and numbers and
 * size encoding; structures keep VFIO's leading fields.
 *
 * Regions are also readable and writable with pread/pwrite on the device
 * node at SPYRE_REGION_OFFSET(index) + offset (the trapped slow path), as
 * with vfio-pci. Region info is VFIO's: flags, size and that offset. How a
 * mappable region is mapped is the transport's business, not the contract's
 * (vfio-pci: mmap of the device fd at the offset; the mock: see
 * include/spyre/mock/spyre_mock.h).
 */
#ifndef SPYRE_UAPI_SPYRE_IOCTL_H
#define SPYRE_UAPI_SPYRE_IOCTL_H

#include <stdint.h>
#include <linux/ioctl.h>
#include "spyre_pci.h"

/* Region indices follow vfio-pci: BARs 0..5, then ROM, config. */
#define SPYRE_REGION_BAR0           0u
#define SPYRE_REGION_BAR2           2u
#define SPYRE_REGION_BAR4           4u
#define SPYRE_REGION_CONFIG         7u
#define SPYRE_REGION_DEVMEM         9u  /* the function's whole device memory (DMA backing) */
#define SPYRE_NUM_REGIONS           10u

#define SPYRE_REGION_INDEX_SHIFT    40
#define SPYRE_REGION_OFFSET(index)  ((uint64_t)(index) << SPYRE_REGION_INDEX_SHIFT)
#define SPYRE_REGION_OFFSET_MASK    ((1ull << SPYRE_REGION_INDEX_SHIFT) - 1)

/* spyre_device_info.flags (VFIO bits, then spyre bits) */
#define SPYRE_DEVICE_FLAGS_RESET    (1u << 0)
#define SPYRE_DEVICE_FLAGS_PCI      (1u << 1)
#define SPYRE_DEVICE_FLAGS_VF       (1u << 8)

/* spyre_region_info.flags (VFIO bits) */
#define SPYRE_REGION_INFO_FLAG_READ  (1u << 0)
#define SPYRE_REGION_INFO_FLAG_WRITE (1u << 1)
#define SPYRE_REGION_INFO_FLAG_MMAP  (1u << 2)

#define SPYRE_PCI_ADDR_MAX          16u /* "0000:01:00.0" + NUL, padded */

struct spyre_device_info {
    uint32_t argsz;             /* 0x00 the daemon sets sizeof (an _IOR call: no input is read) */
    uint32_t flags;             /* 0x04 SPYRE_DEVICE_FLAGS_* */
    uint32_t num_regions;       /* 0x08 */
    uint32_t num_irqs;          /* 0x0C 1: the completion futex in the doorbell page */
    uint32_t cap_offset;        /* 0x10 0: no capability chain */
    uint32_t pad;               /* 0x14 */
    uint16_t vendor_id;         /* 0x18 */
    uint16_t device_id;         /* 0x1A */
    uint16_t card_index;        /* 0x1C */
    uint16_t function_index;    /* 0x1E 0 = PF, n = VF n */
    uint32_t contract_version;  /* 0x20 SPYRE_VERSION */
    int32_t  daemon_pid;        /* 0x24 pid of the process serving this device */
    char     pci_address[SPYRE_PCI_ADDR_MAX]; /* 0x28 NUL-terminated */
    uint64_t mem_size;          /* 0x38 bytes of device memory of this function */
    uint32_t num_cores;         /* 0x40 */
    uint32_t daemon_pid_ns;     /* 0x44 its pid namespace (/proc/self/ns/pid inode); 0: none or unknown (3.4) */
    uint32_t reserved[6];       /* 0x48 */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_device_info) == 0x60, "device info is 96 bytes");

struct spyre_region_info {
    uint32_t argsz;             /* 0x00 caller sets sizeof */
    uint32_t flags;             /* 0x04 SPYRE_REGION_INFO_FLAG_* */
    uint32_t index;             /* 0x08 in: region index */
    uint32_t cap_offset;        /* 0x0C 0 */
    uint64_t size;              /* 0x10 region size in bytes */
    uint64_t offset;            /* 0x18 pread/pwrite (and, on vfio-pci, mmap) offset on the device node */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_region_info) == 0x20, "region info is 32 bytes, as vfio_region_info");

struct spyre_reset_req {
    uint32_t argsz;             /* caller sets sizeof */
    uint32_t flags;             /* must be 0 */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_reset_req) == 8, "reset request is 8 bytes");

/* Ends the caller's hold on the function now and waits until the device has
 * handed it over (fresh, zeroed registers, rings and memory for the next
 * owner). close() does the same, but FUSE delivers that release only after
 * close() has returned; a driver that closes and lets another process open at
 * once releases first. Every later request on this open file fails with ENODEV. */
struct spyre_release_req {
    uint32_t argsz;             /* caller sets sizeof */
    uint32_t flags;             /* must be 0 */
};
SPYRE_STATIC_ASSERT(sizeof(struct spyre_release_req) == 8, "release request is 8 bytes");

/* VFIO's type and command numbers, with size encoding. */
#define SPYRE_IOCTL_TYPE            ';'
#define SPYRE_IOCTL_BASE            100
#define SPYRE_IOC_GET_INFO          _IOR(SPYRE_IOCTL_TYPE, SPYRE_IOCTL_BASE + 7, struct spyre_device_info)
#define SPYRE_IOC_GET_REGION_INFO   _IOWR(SPYRE_IOCTL_TYPE, SPYRE_IOCTL_BASE + 8, struct spyre_region_info)
#define SPYRE_IOC_RESET             _IOW(SPYRE_IOCTL_TYPE, SPYRE_IOCTL_BASE + 11, struct spyre_reset_req)
#define SPYRE_IOC_RELEASE           _IOW(SPYRE_IOCTL_TYPE, SPYRE_IOCTL_BASE + 20, struct spyre_release_req)

#endif /* SPYRE_UAPI_SPYRE_IOCTL_H */
